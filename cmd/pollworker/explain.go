package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/poller"
)

// flagLeaseTTL is the workers' --lease-ttl, which explain needs for the
// settle rule (a session is held back one lease TTL after a move).
const flagLeaseTTL = "lease-ttl"

// explainCommand is `pollworker explain SESSION`.
func explainCommand() *cli.Command {
	return &cli.Command{
		Name:      "explain",
		Usage:     "say who polls a session, who should, and why",
		ArgsUsage: "SESSION",
		Description: "Reads, without writing, what the workers base their placement on (the live workers and\n" +
			"the session index's bucket sizes), computes the plan exactly as they do, and reads the\n" +
			"session's definition, lease, fencing token and loss marker. Prints the ranking of the live\n" +
			"workers for the session's bucket, its planned owner (and whether the balance bound moved\n" +
			"it off its rendezvous owner), its orphan watcher, the lease holder and its incarnation, and\n" +
			"one sentence saying why the session is where it is. Exit status 0 when it could explain\n" +
			"the session, 1 when the session does not exist or Redis could not be read, 2 for bad flags.",
		Flags: append(adminFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.DurationFlag{Name: flagLeaseTTL, Value: poller.DefaultLeaseTTL, Sources: fromEnv(flagLeaseTTL),
				Usage: "the workers' --lease-ttl: a session stays one lease TTL with a worker that took it before moving on"}),
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return usageError(fmt.Errorf("explain: takes exactly one session id, got %d arguments (see %s --help)", cmd.Args().Len(), cmd.FullName()))
			}
			id := cmd.Args().First()
			if err := keyspace.ValidateID(id); err != nil {
				return usageError(fmt.Errorf("explain: session id: %s", idProblem(err)))
			}
			ttl := cmd.Duration(flagLeaseTTL)
			if ttl <= 0 || ttl > maxDuration {
				return usageError(fmt.Errorf("explain: --%s (%v) must be positive and at most %v", flagLeaseTTL, ttl, maxDuration))
			}
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				r, err := newFleetReader(a, ttl)
				if err != nil {
					return fmt.Errorf("explain %s: %w", id, err)
				}
				snap, err := r.Read(ctx, id)
				if err != nil {
					return fmt.Errorf("explain %s: %w", id, err)
				}
				e := snap.Explain(id)
				sched, err := explainSchedule(ctx, a, &e)
				if err != nil {
					return fmt.Errorf("explain %s: %w", id, err)
				}
				w := cmd.Root().Writer
				if cmd.Bool("json") {
					enc := json.NewEncoder(w)
					enc.SetIndent("", "  ")
					if err := enc.Encode(explainedJSON{Explanation: e, Scheduled: sched}); err != nil {
						return err
					}
				} else {
					printExplanation(w, e, sched)
					if e.Found {
						printLastPoll(ctx, a, w, id)
					}
					// Redis over its maxmemory takes no lease: whatever the
					// reason above says, an unowned session stays so.
					if full, err := fullMasters(ctx, a.client); err == nil {
						for _, f := range full {
							fmt.Fprintf(w, "REDIS FULL: %s\n", f)
						}
					}
				}
				if !e.Found {
					// Explained (a lease may be left), but exit 1 as sessions get does.
					return fmt.Errorf("explain %s: no such session", id)
				}
				return nil
			})
		}),
	}
}

// printExplanation formats e for people.
func printExplanation(w io.Writer, e fleet.Explanation, sched *scheduledView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "session:\t%s (index bucket %d)\n", e.Session, e.Bucket)
	switch {
	case !e.Found:
		fmt.Fprintf(tw, "definition:\tnot found\n")
	case e.Malformed != "":
		fmt.Fprintf(tw, "definition:\tmalformed: %s\n", e.Malformed)
	default:
		state := "active"
		if e.Definition.Paused {
			state = "paused"
		}
		if sched != nil {
			fmt.Fprintf(tw, "definition:\tschedule %s (tz %s, catchup %s within %s), %s\n", sched.Schedule, sched.TZ, sched.CatchUp, sched.CatchUpWindow, state)
		} else {
			fmt.Fprintf(tw, "definition:\tinterval %s, %s\n", fleet.MsDuration(e.Definition.IntervalMs), state)
		}
		if e.Definition.Selector != "" {
			fmt.Fprintf(tw, "selector:\t%s (ranked among the live workers whose labels match it)\n", e.Definition.Selector)
		}
	}
	planned := fleet.OrNobody(e.Planned)
	if e.Planned != "" {
		if e.MovedByBound {
			planned += fmt.Sprintf(" (moved off its rendezvous owner %s by the balance bound)", e.Ranking[0].ID)
		} else {
			planned += " (its rendezvous owner)"
		}
	}
	fmt.Fprintf(tw, "planned owner:\t%s\n", planned)
	fmt.Fprintf(tw, "orphan watcher:\t%s\n", dash(e.Watcher))
	if l := e.Lease; l != nil {
		state := "live, current incarnation"
		switch {
		case !l.Live:
			state = "not live"
		case !l.Current:
			state = "previous incarnation of a live id"
		}
		acquired := ""
		if l.AcquiredAgoMs >= 0 {
			acquired = ", acquired " + fleet.MsDuration(l.AcquiredAgoMs) + " ago"
		}
		fmt.Fprintf(tw, "lease:\theld by %s, incarnation %s (%s), expires in %s%s\n", l.Holder, dash(l.Incarnation), state, fleet.MsDuration(l.ExpiresInMs), acquired)
	} else {
		fmt.Fprintf(tw, "lease:\tnone\n")
	}
	fmt.Fprintf(tw, "token:\t%s\n", tokenText(e.Token, e.Lease != nil))
	fmt.Fprintf(tw, "loss marker:\t%s\n", lossText(e.Loss))
	if n := e.NextPoll; n != nil {
		fmt.Fprintf(tw, "next poll:\tin %s: %s\n", fleet.MsDuration(n.DueInMs), n.Why)
	}
	if sched != nil {
		printSlots(func(k, f string, a ...any) { fmt.Fprintf(tw, "%s:\t%s\n", k, fmt.Sprintf(f, a...)) }, sched.Slots, sched.now)
	}
	fmt.Fprintf(tw, "why:\t%s\n", e.Why)
	_ = tw.Flush()
	fmt.Fprintf(w, "ranking for bucket %d (live workers, best first):\n", e.Bucket)
	if len(e.Ranking) == 0 {
		fmt.Fprintln(w, "  (no live worker)")
		return
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  #\tWORKER\tINCARNATION\tWEIGHT\tPLANNED/CAP (%s)\tROLE\n", e.PlanUnit)
	for i, r := range e.Ranking {
		var roles []string
		if i == 0 {
			roles = append(roles, "rendezvous owner")
		}
		if r.ID == e.Planned {
			roles = append(roles, "planned owner")
		}
		if r.ID == e.Watcher {
			roles = append(roles, "watcher")
		}
		if e.Lease != nil && e.Lease.Holder == r.ID {
			roles = append(roles, "holder")
		}
		capText := "-"
		if r.Cap >= 0 {
			capText = strconv.Itoa(r.Cap)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%g\t%d/%s\t%s\n", i+1, r.ID, dash(r.Incarnation), r.Weight, r.Planned, capText, dash(strings.Join(roles, ", ")))
	}
	_ = tw.Flush()
	for _, r := range e.Ranking {
		if r.Cap >= 0 && r.Planned > r.Cap {
			fmt.Fprintln(w, "  (a load above its cap: the plan never splits a bucket, so a bucket no other worker has room for stays"+
				" where it is; with few sessions of very different intervals one bucket can outweigh a cap)")
			break
		}
	}
}

// tokenText shows the fencing record's token; held says a lease is held.
func tokenText(token int64, held bool) string {
	switch {
	case token == 0 && held:
		return "not recorded yet: its holder sends it with every poll (X-Poll-Token), and sessions get shows the one its saved state carries; a session's fencing record is created by its first graceful release (or the record was lost)"
	case token == 0:
		return "none recorded (a session's fencing record is created by its first graceful release: until then its holder alone knows its token; or the record was lost)"
	}
	return strconv.FormatInt(token, 10)
}

// lossText describes the loss marker.
func lossText(l fleet.LossFacts) string {
	switch {
	case !l.Present:
		return "missing (the next acquisition starts the loss quarantine)"
	case l.ServerRunID != "" && l.ServerRunID != l.RunID:
		return "written by run " + l.RunID + ", but the server is run " + l.ServerRunID +
			" (restarted or failed over: the next acquisition starts the loss quarantine; under Cluster, a slot migrated here from a master that lost nothing does not)"
	case l.QuarantineLeftMs > 0:
		return "run " + l.RunID + ", quarantine for another " + fleet.MsDuration(l.QuarantineLeftMs)
	}
	return "run " + l.RunID + ", no quarantine"
}
