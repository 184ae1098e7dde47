package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// flagLeaseTTL is the workers' --lease-ttl, which explain needs for the
// settle rule (a session is held back one lease TTL after a move).
const flagLeaseTTL = "lease-ttl"

// Reasons explain gives, as codes (the JSON "reason"); why turns the facts
// into one of them and a sentence.
const (
	reasonNotFound            = "not_found"
	reasonMalformed           = "malformed"
	reasonPaused              = "paused"
	reasonNoWorker            = "unowned_no_live_worker"
	reasonQuarantine          = "unowned_quarantine"
	reasonLossDetected        = "unowned_loss_detected"
	reasonUnowned             = "unowned"
	reasonHolderNotLive       = "held_by_not_live"
	reasonPreviousIncarnation = "held_by_previous_incarnation"
	reasonCordoned            = "held_by_cordoned"
	reasonPreferred           = "preferred_owner"
	reasonOrphan              = "orphan_adopted_by_watcher"
	reasonSettling            = "held_back_after_move"
	reasonContended           = "contended"
	reasonNoMatchingWorker    = "no_matching_worker"
	reasonBadKey              = "bad_key"
)

// explanation is what `pollworker explain SESSION` reports: the facts read
// from Redis about one session and, from them, why it is where it is.
type explanation struct {
	Session string `json:"session"`
	// Bucket is the session's index bucket, the unit the plan places.
	Bucket int `json:"bucket"`
	// ServerTime is the Redis clock when the lease was read.
	ServerTime time.Time `json:"server_time"`
	// Definition is the stored session, nil when missing or malformed.
	Definition *sessionDefinition `json:"definition"`
	// Found is false when no definition is stored under the session key.
	Found bool `json:"found"`
	// Malformed says why a stored definition cannot be used, "" if it can.
	Malformed string `json:"malformed,omitempty"`
	// Ranking are the live workers ranked for the bucket by rendezvous
	// hashing, best first (assign.Fleet.Rank).
	Ranking []rankedWorker `json:"ranking"`
	// Planned is the bucket's owner in the plan the workers compute, ""
	// with no live worker.
	Planned string `json:"planned_owner"`
	// PlanUnit is what the ranking's planned loads count: "polls/day", or
	// "sessions" for an index whose loads are incomplete.
	PlanUnit string `json:"plan_unit"`
	// NoMatchingWorker is set for a session whose selector no live
	// worker's labels match: it is polled by nobody.
	NoMatchingWorker bool `json:"no_matching_worker"`
	// MovedByBound is set when the balance bound moved the bucket off its
	// rendezvous owner (Ranking[0]).
	MovedByBound bool `json:"moved_by_balance_bound"`
	// Watcher is the worker that adopts the session if it stays without
	// a lease (assign.Plan.Watcher), "" with fewer than two workers.
	Watcher string `json:"watcher"`
	// Lease is the current lease, nil when nobody holds it.
	Lease *leaseFacts `json:"lease"`
	// BadKey is a key of the session the workers cannot use, nil if none.
	BadKey *lease.BadKey `json:"bad_key,omitempty"`
	// Token is the fencing counter (the last token minted), 0 if none.
	Token int64 `json:"token"`
	// Loss is the loss marker of the lease's slot.
	Loss lossFacts `json:"loss_marker"`
	// LeaseTTLMs is the workers' lease TTL as given by --lease-ttl.
	LeaseTTLMs int64 `json:"lease_ttl_ms"`
	// NextPoll is when the next poll is due and why, when Redis says
	// (a handoff mark, a backoff); nil otherwise.
	NextPoll *nextPollFacts `json:"next_poll,omitempty"`
	// Reason is a code for Why.
	Reason string `json:"reason"`
	// Why says in one sentence why the session is where it is.
	Why string `json:"why"`
}

// sessionDefinition is the part of a definition explain shows (the URL is
// left out: it may carry a password).
type sessionDefinition struct {
	IntervalMs int64 `json:"interval_ms"`
	Paused     bool  `json:"paused"`
	// Selector is the session's selector (canonical), "" for none: only
	// workers whose labels match it are ranked, and may poll it.
	Selector string `json:"selector,omitempty"`
}

// rankedWorker is one live worker in a session's ranking.
type rankedWorker struct {
	ID string `json:"id"`
	// Incarnation is the live incarnation (from its heartbeat), "" if
	// unknown.
	Incarnation string `json:"incarnation,omitempty"`
	// Planned is the load the plan puts on it (in explanation.PlanUnit),
	// Cap its bound (-1 when unbounded).
	Planned int `json:"planned"`
	Cap     int `json:"cap"`
	// Weight is the capacity it declared (--weight; 1 when unset).
	Weight float64 `json:"weight"`
}

// leaseFacts is the lease of a session.
type leaseFacts struct {
	Holder      string `json:"holder"`
	Incarnation string `json:"incarnation,omitempty"`
	// Live is set when Holder is a live worker; Current when the lease's
	// incarnation is that worker's live one (or either is unknown).
	Live    bool `json:"holder_live"`
	Current bool `json:"current_incarnation"`
	// Cordoned is set when Holder is a cordoned live worker (pollworker
	// drain): it hands its sessions off.
	Cordoned bool `json:"holder_cordoned"`
	// ExpiresInMs is the remaining TTL, -1 if the key has none.
	ExpiresInMs int64 `json:"expires_in_ms"`
	// AcquiredAgoMs is read from the token (minted from the server clock
	// in microseconds); -1 when the token does not tell.
	AcquiredAgoMs int64 `json:"acquired_ago_ms"`
}

// lossFacts is the loss marker ("<run id>:<quarantine end ms>") of the
// slot of the session's lease, against the server's run id and clock.
type lossFacts struct {
	// Present is false when the marker is missing: the next acquisition
	// writes it and starts a quarantine.
	Present bool   `json:"present"`
	RunID   string `json:"run_id,omitempty"`
	// ServerRunID is the run id of the server now, "" when INFO is
	// refused. A marker of another run id means a restart or failover:
	// the next acquisition starts a quarantine.
	ServerRunID string `json:"server_run_id,omitempty"`
	// QuarantineLeftMs is how long the quarantine the marker records
	// lasts from now; 0 when over.
	QuarantineLeftMs int64 `json:"quarantine_left_ms"`
}

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
			"one sentence saying why the session is where it is. Exit status 0 whenever it could read\n" +
			"Redis, also for a session that does not exist.",
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
				e, err := explainSession(ctx, a.client, a.keys, a.store, id, ttl)
				if err != nil {
					return fmt.Errorf("explain %s: %w", id, err)
				}
				w := cmd.Root().Writer
				if cmd.Bool("json") {
					enc := json.NewEncoder(w)
					enc.SetIndent("", "  ")
					if err := enc.Encode(e); err != nil {
						return err
					}
				} else {
					printExplanation(w, e)
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

// explainSession reads the facts about session id and explains them.
func explainSession(ctx context.Context, client redis.UniversalClient, keys keyspace.Space, store *session.Store, id string, leaseTTL time.Duration) (explanation, error) {
	e := explanation{Session: id, Bucket: keyspace.BucketOf(id), Ranking: []rankedWorker{}, LeaseTTLMs: leaseTTL.Milliseconds()}
	s, err := store.Get(ctx, id)
	switch {
	case err == nil:
		e.Found = true
		e.Definition = &sessionDefinition{IntervalMs: time.Duration(s.Interval).Milliseconds(), Paused: s.Paused, Selector: s.SelectorKey()}
	case errors.Is(err, session.ErrNotFound):
	case errors.Is(err, session.ErrMalformed):
		e.Found = true
		e.Malformed = strings.TrimPrefix(err.Error(), "get "+id+": ")
	default:
		return explanation{}, err
	}
	pl, err := readPlacement(ctx, client, keys, store)
	if err != nil {
		return explanation{}, err
	}
	plan := pl.Plan
	if e.Definition != nil && e.Definition.Selector != "" {
		plan = pl.PlanOf(e.Definition.Selector) // ranked among the matching workers only
		e.NoMatchingWorker = plan.Fleet().Len() == 0
	}
	for _, w := range plan.Fleet().Rank(id) {
		e.Ranking = append(e.Ranking, rankedWorker{ID: w, Incarnation: pl.Infos[w].Incarnation, Planned: plan.Load(w), Cap: plan.Cap(w),
			Weight: weightOf(pl.Infos, w)})
	}
	e.PlanUnit = pl.loadUnit()
	if plan != pl.Plan {
		e.PlanUnit = "polls/day" // a selector's units are always weighed by load
	}
	e.Planned = plan.Owner(e.Bucket)
	e.MovedByBound = e.Planned != "" && !plan.Preferred(e.Bucket)
	e.Watcher = plan.Watcher(e.Bucket)

	holdings, err := lease.Inspect(ctx, client, keys, []string{id}, 0)
	if err != nil {
		return explanation{}, err
	}
	now, err := client.Time(ctx).Result()
	if err != nil {
		return explanation{}, fmt.Errorf("read the server clock: %w", err)
	}
	e.ServerTime = now.UTC()
	if e.BadKey = holdings[0].Bad; e.BadKey == nil || e.BadKey.Role != lease.RoleFence {
		if e.Token, err = readToken(ctx, client, keys.Fence(id)); err != nil {
			return explanation{}, err
		}
	}
	if h := holdings[0]; h.Owner != "" {
		o := lease.ParseOwner(h.Owner)
		live, current := pl.liveHolder(o.Holder, o.Incarnation)
		e.Lease = &leaseFacts{Holder: o.Holder, Incarnation: o.Incarnation, Live: live, Current: current, Cordoned: pl.Members.IsCordoned(o.Holder),
			ExpiresInMs: h.Remaining.Milliseconds(), AcquiredAgoMs: acquiredAgo(e.Token, now)}
	}
	if e.Loss, err = readLoss(ctx, client, keys, id, now); err != nil {
		return explanation{}, err
	}
	if e.NextPoll, err = readNextPoll(ctx, client, keys, id, e, now); err != nil {
		return explanation{}, err
	}
	e.Reason, e.Why = why(e)
	return e, nil
}

// readToken reads a fencing counter, 0 when it does not exist.
func readToken(ctx context.Context, client redis.UniversalClient, key string) (int64, error) {
	v, err := client.Get(ctx, key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read fencing counter: %w", err)
	}
	return v, nil
}

// acquiredAgo reads the acquisition time off a token: acquire.lua mints
// max(counter + 1, server clock in µs), so a token within a day before now
// is, to the microsecond, when it was minted. -1 when it does not tell
// (tokens from a plain counter, or a counter ahead of the clock).
func acquiredAgo(token int64, now time.Time) int64 {
	ago := now.Sub(time.UnixMicro(token))
	if token <= 0 || ago < 0 || ago > 24*time.Hour {
		return -1
	}
	return ago.Milliseconds()
}

// readLoss reads the loss marker of the slot of session id's lease (slot 0
// outside Cluster, as lease.Manager does) and the run id of the server
// that holds it.
func readLoss(ctx context.Context, client redis.UniversalClient, keys keyspace.Space, id string, now time.Time) (lossFacts, error) {
	slot := uint16(0)
	var server redis.Cmdable = client
	if cc, ok := client.(*redis.ClusterClient); ok {
		slot = keyspace.Slot(keys.Lease(id))
		c, err := cc.MasterForKey(ctx, keys.Epoch(slot))
		if err != nil {
			return lossFacts{}, fmt.Errorf("find the master of the loss marker: %w", err)
		}
		server = c
	}
	var f lossFacts
	marker, err := server.Get(ctx, keys.Epoch(slot)).Result()
	switch {
	case errors.Is(err, redis.Nil):
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		f.Present, f.RunID = true, "(wrong type: the next acquisition overwrites it with a fresh quarantine)"
	case err != nil:
		return lossFacts{}, fmt.Errorf("read the loss marker: %w", err)
	default:
		f.Present = true
		runID, end, _ := strings.Cut(marker, ":")
		f.RunID = runID
		if ms, err := strconv.ParseInt(end, 10, 64); err == nil {
			f.QuarantineLeftMs = max(ms-now.UnixMilli(), 0)
		}
	}
	// INFO may be refused (a restricted ACL): a restart then goes unseen
	// here, as it does in acquire.lua.
	if info, err := server.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
				f.ServerRunID = v
			}
		}
	}
	return f, nil
}

// why says, from the facts alone, why the session is where it is: a
// reason code and one sentence. It is pure; the rules mirror the workers'
// (poller/round.go: checkWorker, settled, orphanDue; acquire.lua's loss
// quarantine).
func why(e explanation) (reason, sentence string) {
	l := e.Lease
	held := ""
	switch {
	case l == nil:
	case l.Live && l.Current:
		held = fmt.Sprintf("; %s still holds its lease and releases it at its next round (or it expires in %s)", l.Holder, msDuration(l.ExpiresInMs))
	default:
		held = fmt.Sprintf("; its lease is still held by %s, which is not live, until it expires in %s", l.Holder, msDuration(l.ExpiresInMs))
	}
	switch {
	case !e.Found:
		return reasonNotFound, "session not found: no definition is stored under this id" + held
	case e.Malformed != "":
		return reasonMalformed, "no worker polls it: its stored definition is malformed (" + e.Malformed + ")" + held
	case e.Definition.Paused:
		return reasonPaused, "paused: no worker polls it" + held
	case e.BadKey != nil:
		return reasonBadKey, fmt.Sprintf("nobody acquires it: its %s key %s cannot be used (%s); repair or delete it by hand (pollworker never does)",
			e.BadKey.Role, e.BadKey.Key, e.BadKey.Problem) + held
	case e.NoMatchingWorker:
		return reasonNoMatchingWorker, fmt.Sprintf("no live worker matches its selector %s: nobody polls it until a worker whose --labels include it joins", e.Definition.Selector) + held
	case l == nil:
		return whyUnowned(e)
	case !l.Live:
		return reasonHolderNotLive, fmt.Sprintf("nobody polls it: its lease is held by %s, which is not live (crashed or cut off without releasing); "+
			"%s takes it when the lease expires in %s", l.Holder, orNobody(e.Planned), msDuration(l.ExpiresInMs))
	case !l.Current:
		return reasonPreviousIncarnation, fmt.Sprintf("nobody polls it: its lease is held by a previous incarnation (%s) of %s, which crashed and restarted under the same id; "+
			"%s takes it when the lease expires in %s", l.Incarnation, l.Holder, orNobody(e.Planned), msDuration(l.ExpiresInMs))
	case l.Cordoned:
		return reasonCordoned, fmt.Sprintf("draining: %s polls it but is cordoned, so it hands it to the planned owner %s at its next round",
			l.Holder, orNobody(e.Planned))
	case l.Holder == e.Planned && e.MovedByBound:
		return reasonPreferred, fmt.Sprintf("preferred owner: %s polls it, as planned; the balance bound moved its bucket off its rendezvous owner %s, which is full",
			l.Holder, e.Ranking[0].ID)
	case l.Holder == e.Planned:
		return reasonPreferred, fmt.Sprintf("preferred owner: %s polls it, as planned (its rendezvous owner)", l.Holder)
	case l.Holder == e.Watcher:
		return reasonOrphan, fmt.Sprintf("orphan adopted by the watcher: %s polls it (it took the session while nobody held it, or owned it before the membership changed) "+
			"and hands it back to the planned owner %s after the orphan grace", l.Holder, e.Planned)
	case l.AcquiredAgoMs >= 0 && l.AcquiredAgoMs < e.LeaseTTLMs:
		return reasonSettling, fmt.Sprintf("held back after a move: %s took it %s ago and keeps it for one lease TTL unless the membership changes (settle rule); "+
			"then it hands it to the planned owner %s, in about %s", l.Holder, msDuration(l.AcquiredAgoMs), e.Planned, msDuration(e.LeaseTTLMs-l.AcquiredAgoMs))
	default:
		return reasonContended, fmt.Sprintf("contended: %s polls it but has not handed it off yet; the planned owner %s takes it once %s releases it at its next round",
			l.Holder, e.Planned, l.Holder)
	}
}

// whyUnowned explains an active session nobody holds.
func whyUnowned(e explanation) (reason, sentence string) {
	loss := e.Loss
	switch {
	case len(e.Ranking) == 0:
		return reasonNoWorker, "unowned: there is no live worker"
	case loss.Present && loss.QuarantineLeftMs > 0 && (loss.ServerRunID == "" || loss.ServerRunID == loss.RunID):
		return reasonQuarantine, fmt.Sprintf("unowned, waiting out the loss quarantine (a new keyspace, or Redis lost data): no free lease is taken until it ends in %s "+
			"(so that every lease granted before a loss has ended at its holder); then %s takes it. `pollworker init` spares a new keyspace this wait", msDuration(loss.QuarantineLeftMs), e.Planned)
	case !loss.Present:
		return reasonLossDetected, "unowned: the loss marker is missing (Redis lost its data, or the keyspace is new): the next acquisition starts the loss quarantine (--loss-quarantine), then " +
			e.Planned + " takes it"
	case loss.ServerRunID != "" && loss.ServerRunID != loss.RunID:
		return reasonLossDetected, "unowned: Redis restarted or failed over since the loss marker was written (run id " + loss.RunID + ", now " + loss.ServerRunID +
			"): the next acquisition starts the loss quarantine (--loss-quarantine), then " + e.Planned + " takes it (under Cluster, unless the slot was migrated here: then it takes it at once)"
	case e.Watcher != "":
		return reasonUnowned, fmt.Sprintf("unowned right now: the planned owner %s takes it at its next round; if it does not, the watcher %s adopts it after the orphan grace",
			e.Planned, e.Watcher)
	default:
		return reasonUnowned, fmt.Sprintf("unowned right now: the planned owner %s takes it at its next round", e.Planned)
	}
}

func orNobody(id string) string {
	if id == "" {
		return "nobody (no live worker)"
	}
	return id
}

// msDuration formats milliseconds for people; -1 (no TTL) is "never".
func msDuration(ms int64) string {
	if ms < 0 {
		return "never"
	}
	return shortDuration(time.Duration(ms) * time.Millisecond)
}

// printExplanation formats e for people.
func printExplanation(w io.Writer, e explanation) {
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
		fmt.Fprintf(tw, "definition:\tinterval %s, %s\n", msDuration(e.Definition.IntervalMs), state)
		if e.Definition.Selector != "" {
			fmt.Fprintf(tw, "selector:\t%s (ranked among the live workers whose labels match it)\n", e.Definition.Selector)
		}
	}
	planned := orNobody(e.Planned)
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
			acquired = ", acquired " + msDuration(l.AcquiredAgoMs) + " ago"
		}
		fmt.Fprintf(tw, "lease:\theld by %s, incarnation %s (%s), expires in %s%s\n", l.Holder, dash(l.Incarnation), state, msDuration(l.ExpiresInMs), acquired)
	} else {
		fmt.Fprintf(tw, "lease:\tnone\n")
	}
	fmt.Fprintf(tw, "token:\t%s\n", tokenText(e.Token))
	fmt.Fprintf(tw, "loss marker:\t%s\n", lossText(e.Loss))
	if n := e.NextPoll; n != nil {
		fmt.Fprintf(tw, "next poll:\tin %s: %s\n", msDuration(n.DueInMs), n.Why)
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
}

// tokenText shows a token.
func tokenText(token int64) string {
	if token == 0 {
		return "none (no lease was ever granted, or the counter was lost)"
	}
	return strconv.FormatInt(token, 10)
}

// lossText describes the loss marker.
func lossText(l lossFacts) string {
	switch {
	case !l.Present:
		return "missing (the next acquisition starts the loss quarantine)"
	case l.ServerRunID != "" && l.ServerRunID != l.RunID:
		return "written by run " + l.RunID + ", but the server is run " + l.ServerRunID + " (restarted: the next acquisition starts the loss quarantine)"
	case l.QuarantineLeftMs > 0:
		return "run " + l.RunID + ", quarantine for another " + msDuration(l.QuarantineLeftMs)
	}
	return "run " + l.RunID + ", no quarantine"
}

// weightOf is the planner's weight of worker id: its heartbeat's, 1 when
// unknown.
func weightOf(infos map[string]nodes.Info, id string) float64 {
	if info, ok := infos[id]; ok {
		return info.PlanWeight()
	}
	return 1
}
