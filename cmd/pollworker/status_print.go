package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/nodes"
)

// flagScanLeases makes status look for leases of sessions not in the store.
const flagScanLeases = "scan-leases"

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show live workers, sessions, leases per worker and balance",
		Description: "Lists the live workers (with their incarnation: a worker restarted under the same --id\n" +
			"gets a new one), the sessions, who holds their leases, and the active sessions nobody polls\n" +
			"now: unowned ones, and those whose lease is held by a worker that is not live or by an\n" +
			"earlier incarnation of a live id (a worker killed and restarted: its leases run out by TTL).\n" +
			"Leases of sessions that are not in the store are found with SCAN (MATCH <key-prefix>:lease:{*},\n" +
			"COUNT 1000, on every master of a Cluster): a pass over the whole keyspace, once per run or\n" +
			"per --watch refresh; --scan-leases=false skips it.",
		Flags: append(adminFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.DurationFlag{Name: flagWatch, Usage: "redraw in place every this long until interrupted (0: print once)"},
			&cli.BoolFlag{Name: flagScanLeases, Value: true, Usage: "SCAN for leases of sessions not in the store (a pass over the keyspace)"}),
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			return withAdmin(ctx, cmd, func(ctx context.Context, a admin) error {
				once := func(ctx context.Context, w io.Writer) error {
					st, err := computeStatus(ctx, a.client, a.keys, cmd.Bool(flagScanLeases))
					if err != nil {
						return fmt.Errorf("status: %w", err)
					}
					if cmd.Bool("json") {
						enc := json.NewEncoder(w)
						enc.SetIndent("", "  ")
						return enc.Encode(st)
					}
					printStatus(w, st)
					return nil
				}
				w := cmd.Root().Writer
				every := cmd.Duration(flagWatch)
				if every <= 0 {
					return once(ctx, w)
				}
				return watch(ctx, w, every, a.timeout, isTerminal(w), once)
			})
		}),
	}
}

// printStatus formats st for people.
func printStatus(w io.Writer, st clusterStatus) {
	fmt.Fprintf(w, "live nodes: %d\n", len(st.Nodes))
	if len(st.Nodes) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tHOST\tPID\tVERSION\tSTARTED\tINCARNATION\tLAST HEARTBEAT\tEXPIRES IN\tWEIGHT\tLABELS\tLEASES\tPOLLS/S")
		for _, n := range st.Nodes {
			started := "-"
			if !n.Started.IsZero() {
				started = n.Started.UTC().Format(time.RFC3339)
			}
			age := "-"
			if n.HeartbeatAgeMs >= 0 {
				age = shortDuration(time.Duration(n.HeartbeatAgeMs)*time.Millisecond) + " ago"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%g\t%s\t%d\t%.2f\n", n.ID, dash(n.Host), dashInt(n.PID), dash(n.Version), started,
				dash(n.Incarnation), age, shortDuration(time.Duration(n.ExpiresInMs)*time.Millisecond), n.Weight,
				dash(nodes.Labels(n.Labels).String()), n.Leases, n.PollsPerSecond)
		}
		_ = tw.Flush()
		for _, n := range st.Nodes {
			if n.Behind != "" {
				fmt.Fprintf(w, "  %s is behind (at its last heartbeat): %s\n", n.ID, n.Behind)
			}
		}
	}
	printJunkMembers(w, st.JunkMembers)
	s := st.Sessions
	fmt.Fprintf(w, "sessions: %d total, %d active, %d paused, %d malformed\n", s.Total, s.Active, s.Paused, s.Malformed)
	for _, m := range st.Malformed {
		fmt.Fprintf(w, "  malformed %s: %s\n", printableID(m.ID), m.Reason)
	}
	l := st.Leases
	fmt.Fprintf(w, "leases: %d of %d active sessions (%d by live nodes, %d by previous incarnations, %d by other holders)\n",
		l.Held, s.Active, l.ByLive, l.ByPrevious, l.ByOthers)
	for _, h := range st.OtherHolders {
		why := "not live"
		if h.Previous {
			why = "previous incarnation of a live id, not polling"
		}
		inc := ""
		if h.Incarnation != "" {
			inc = " incarnation " + h.Incarnation
		}
		fmt.Fprintf(w, "  %s%s (%s; leases expire by TTL, within %s): %d\n", h.ID, inc, why,
			shortDuration(time.Duration(h.ExpiresInMs)*time.Millisecond), h.Leases)
	}
	fmt.Fprintf(w, "unowned active sessions: %d%s\n", l.Unowned, fleet.SampleText(st.UnownedSample, l.Unowned))
	if q := st.LossQuarantine; q.Count > 0 {
		fmt.Fprintf(w, "loss quarantine: %s\n", q.text())
	}
	if u := st.Unplaceable; u.Count > 0 {
		sels := slices.Sorted(maps.Keys(u.BySelector))
		parts := make([]string, len(sels))
		for i, sel := range sels {
			parts[i] = fmt.Sprintf("%s: %d", sel, u.BySelector[sel])
		}
		fmt.Fprintf(w, "UNPLACEABLE: %d active sessions whose selector no live worker's labels match, polled by nobody (%s)%s\n",
			u.Count, strings.Join(parts, "; "), fleet.SampleText(u.Sample, u.Count))
	}
	var cordoned []string
	for _, n := range st.Nodes {
		if n.Cordoned {
			cordoned = append(cordoned, n.ID)
		}
	}
	for _, f := range st.RedisFull {
		fmt.Fprintf(w, "REDIS FULL: %s\n", f)
	}
	switch {
	case st.CordonsSuspended:
		fmt.Fprintf(w, "CORDONS SUSPENDED: every live worker is cordoned (%s), so the cordons count for nothing and the workers keep polling every session until one is uncordoned (pollworker uncordon ID)\n", strings.Join(cordoned, ", "))
	case len(cordoned) > 0:
		fmt.Fprintf(w, "cordoned (take no sessions; pollworker uncordon ID): %s\n", strings.Join(cordoned, ", "))
	}
	var others []string
	for _, n := range st.Nodes {
		if n.OtherSessions != "" {
			others = append(others, fmt.Sprintf("%s (%s)", n.ID, n.OtherSessions))
		}
	}
	if len(others) > 0 {
		fmt.Fprintf(w, "OTHER SESSION PREFIX (take no sessions: they read other sessions; every worker under one --key-prefix needs the same --session-prefix): %s\n", strings.Join(others, ", "))
	}
	if l.NotPlanned > 0 {
		fmt.Fprintf(w, "held off their planned worker: %d (moving, held back one lease TTL after a move, or adopted orphans)\n", l.NotPlanned)
	}
	if n := l.ByPrevious + l.ByOthers; n > 0 {
		fmt.Fprintf(w, "NOT POLLED: %d active sessions held by a holder that is not polling them%s\n", n, fleet.SampleText(st.NotPolledSample, n))
	}
	u := st.UnknownLeases
	if u.Scanned {
		ids := make([]string, len(u.Lease))
		for i, lh := range u.Lease {
			ids[i] = lh.Session + " by " + lh.Holder
		}
		fmt.Fprintf(w, "leases of sessions not in the store: %d%s\n", u.Count, fleet.SampleText(ids, u.Count))
	} else if u.Skipped != "" {
		fmt.Fprintf(w, "leases of sessions not in the store: not looked for (%s)\n", u.Skipped)
	}
	if len(st.Nodes) > 0 {
		fmt.Fprintf(w, "balance: %s\n", st.Balance)
		fmt.Fprintf(w, "poll balance: max/mean %.2f of polls per second per unit of weight (the plan weighs %s)\n", st.PollBalance, st.PlanUnit)
		if len(st.PollBalanceByLabels) > 0 {
			parts := make([]string, len(st.PollBalanceByLabels))
			for i, b := range st.PollBalanceByLabels {
				parts[i] = fmt.Sprintf("%s %.2f (%s)", cmp.Or(b.Labels, "(no labels)"), b.PollBalance, plural(b.Workers, "worker"))
			}
			fmt.Fprintf(w, "poll balance by worker labels: %s\n", strings.Join(parts, "; "))
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func dashInt(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// shortDuration formats d with at most millisecond precision.
func shortDuration(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}

// flagWatch is status's refresh period.
const flagWatch = "watch"

// clearScreen moves the cursor home and erases the display (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// isTerminal reports whether w is a terminal (a character device), where
// watch may redraw in place; a pipe or a file gets no ANSI codes.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// watch calls draw every period until ctx is done, each call bounded by
// timeout, and redraws the screen in place (on a terminal; elsewhere each
// frame follows the last after a blank line, without ANSI codes) with one
// write per frame, once draw has finished: the previous frame stays on screen while a refresh
// waits on Redis. A failed refresh shows its error with its time and since
// when refreshes fail, above the last successful frame and its time; the
// error stays until a refresh succeeds. Only ctx ends the watch.
func watch(ctx context.Context, w io.Writer, period, timeout time.Duration, terminal bool, draw func(context.Context, io.Writer) error) error {
	t := time.NewTicker(period)
	defer t.Stop()
	var good []byte      // the last successful frame's body
	var goodAt time.Time // when it was read
	var failSince time.Time
	for {
		var body, frame bytes.Buffer
		rctx, cancel := context.WithTimeout(ctx, timeout)
		err := draw(rctx, &body)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		now := time.Now().UTC()
		switch {
		case terminal:
			frame.WriteString(clearScreen)
		case good != nil || !failSince.IsZero():
			frame.WriteString("\n") // not the first frame
		}
		fmt.Fprintf(&frame, "pollworker status, every %v (Ctrl-C to stop)   %s\n\n", period, now.Format(time.TimeOnly))
		if err == nil {
			good, goodAt, failSince = body.Bytes(), now, time.Time{}
			frame.Write(good)
		} else {
			if failSince.IsZero() {
				failSince = now
			}
			fmt.Fprintf(&frame, "ERROR at %s (failing since %s): %v\n", now.Format("15:04:05 MST"), failSince.Format("15:04:05 MST"), err)
			if good != nil {
				fmt.Fprintf(&frame, "\nlast successful refresh, at %s (%s ago):\n", goodAt.Format("15:04:05 MST"), now.Sub(goodAt).Round(time.Second))
				frame.Write(good)
			}
		}
		_, _ = w.Write(frame.Bytes())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
