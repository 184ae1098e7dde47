package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// exitUnhealthy is check's exit code when an invariant is broken; 1 still
// means that the check itself failed (Redis unreachable), 2 bad flags.
const exitUnhealthy = 3

// The invariants check verifies, by the names it reports them under.
const (
	checkHolderNotLive  = "lease-holder-not-live"
	checkPrevious       = "lease-held-by-previous-incarnation"
	checkDuplicateID    = "duplicate-id"
	checkUnknownSession = "lease-of-unknown-session"
	checkNoLease        = "session-without-lease"
	checkNotPlanned     = "not-planned-owner"
	checkEviction       = "eviction-policy"
	checkIndexSizes     = "index-sizes"
	checkUnplaceable    = "unplaceable"
	checkBadKey         = "bad-key"
)

// allChecks lists them in the order they are reported.
var allChecks = []string{checkHolderNotLive, checkPrevious, checkDuplicateID, checkUnknownSession,
	checkNoLease, checkNotPlanned, checkUnplaceable, checkEviction, checkIndexSizes, checkBadKey, checkCorruptState, checkJunkMember}

// Flags of check.
const (
	flagGrace         = "grace"
	flagMaxNotPlanned = "max-not-planned"
)

// maxProblemLines bounds the lines one check prints; the rest are counted.
const maxProblemLines = 10

// renewSlack is how much a lease's remaining TTL may exceed what the time
// between two reads leaves of it, before check counts it as renewed.
const renewSlack = 200 * time.Millisecond

// checkReport is what `pollworker check` reports.
type checkReport struct {
	// OK is set when no invariant is broken.
	OK bool `json:"ok"`
	// Checks are the invariants verified (those skipped are in Notes).
	Checks []string `json:"checks"`
	// Problems are the broken invariants, one per offending item.
	Problems []checkProblem `json:"problems"`
	// ProblemCount is the number of broken items, the lines that sum up
	// the rest of a check included.
	ProblemCount int `json:"problem_count"`
	// Notes say what was skipped or approximated, and counts below a bound.
	Notes []string `json:"notes"`
	// Workers, Sessions and Leases count what the last read saw: live
	// workers, active sessions and their leases.
	Workers  int `json:"workers"`
	Sessions int `json:"active_sessions"`
	Leases   int `json:"leases"`
}

// checkProblem is one broken invariant.
type checkProblem struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
	// Count is the number of items the line stands for: 1, or more for
	// a line that sums up the rest ("and 20 more").
	Count int `json:"count"`
}

// checkCommand is `pollworker check`.
func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "verify the fleet's invariants from Redis, for cron and CI",
		Description: "Reads, without writing, the live workers, the sessions, their leases and the index, twice\n" +
			"--grace apart, and prints one line per broken invariant:\n\n" +
			"  lease-holder-not-live               an active session's lease is held by a worker that is not live\n" +
			"  lease-held-by-previous-incarnation  ... by an earlier incarnation of a live id (killed and restarted)\n" +
			"  duplicate-id                        a lease of a live id under another incarnation than its heartbeat's\n" +
			"                                      was renewed between the reads: two processes run with one --id\n" +
			"  lease-of-unknown-session            a lease of a session that is not in the store (SCAN)\n" +
			"  session-without-lease               an active session had no lease at both reads\n" +
			"  not-planned-owner                   more than --max-not-planned leases held, at both reads, by a live\n" +
			"                                      worker that the plan does not place them on\n" +
			"  eviction-policy                     maxmemory-policy is not noeviction: leases can be evicted\n" +
			"  unplaceable                         active sessions whose selector no live worker's labels match\n" +
			"                                      (polled by nobody; not also reported as session-without-lease)\n" +
			"  index-sizes                         the index's bucket sizes hash disagrees with SCARD of a bucket\n" +
			"  bad-key                             an active session's lease key, fencing counter or handoff mark is\n" +
			"                                      of the wrong type (or a counter not a decimal below 2^53-1): nobody\n" +
			"                                      acquires it until it is repaired by hand (not also session-without-lease)\n" +
			"  corrupt-state                       a session's saved state is unreadable (not a hash, a field not a decimal):\n" +
			"                                      polled as never saved; its next save overwrites it\n" +
			"  junk-member                         an entry of the node index is not a live worker (an invalid id, or no\n" +
			"                                      heartbeat key): ignored by the workers; pollworker forget removes it\n\n" +
			"Checks Redis refuses (CONFIG or SCAN under a restricted ACL) are skipped with a note.\n" +
			"--grace 0 reads once: session-without-lease then reports sessions between two rounds, and\n" +
			"duplicate-id is skipped. A wait of 1s or more is announced on stderr. Exit status: 0 healthy, 3 an invariant is broken, 1 the check could\n" +
			"not run (Redis unreachable), 2 bad flags.",
		Flags: append(adminFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.DurationFlag{Name: flagGrace, Value: 20 * time.Second, Sources: fromEnv(flagGrace),
				Usage: "time between the two reads: a session counts as without a lease only if it has none at both (the workers' orphan grace is 2 × --discovery-interval)"},
			&cli.IntFlag{Name: flagMaxNotPlanned, Value: -1, Sources: fromEnv(flagMaxNotPlanned),
				Usage: "most leases a live worker may hold off the plan (moves, orphans, held back a lease TTL after a move) before check fails; -1 only reports the count"}),
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			grace := cmd.Duration(flagGrace)
			if grace < 0 || grace > maxDuration {
				return usageError(fmt.Errorf("check: --%s (%v) must be from 0 to %v", flagGrace, grace, maxDuration))
			}
			maxNotPlanned := cmd.Int(flagMaxNotPlanned)
			if maxNotPlanned < -1 {
				return usageError(fmt.Errorf("check: --%s (%d) must be -1 (no bound) or at least 0", flagMaxNotPlanned, maxNotPlanned))
			}
			return withAdminSteps(ctx, cmd, func(ctx context.Context, a admin) error {
				r, err := runChecks(ctx, a, grace, maxNotPlanned, cmd.Root().ErrWriter)
				if err != nil {
					return fmt.Errorf("check: %w", err)
				}
				w := cmd.Root().Writer
				if cmd.Bool("json") {
					enc := json.NewEncoder(w)
					enc.SetIndent("", "  ")
					if err := enc.Encode(r); err != nil {
						return err
					}
				} else {
					printCheck(w, r)
				}
				if !r.OK {
					var names []string
					for _, p := range r.Problems {
						if !slices.Contains(names, p.Check) {
							names = append(names, p.Check)
						}
					}
					return &exitError{code: exitUnhealthy, err: fmt.Errorf("check: %d problems: %s", r.ProblemCount, strings.Join(names, ", "))}
				}
				return nil
			})
		}),
	}
}

// fleetRead is one read of the state check verifies.
type fleetRead struct {
	pl       placement
	active   []string
	holdings map[string]lease.Holding // active session -> its lease
	// unplaceable are the active sessions whose selector no live worker
	// matches, by selector (not in active: nobody should hold them).
	unplaceable map[string][]string
	// at is the server clock right after the leases were read.
	at time.Time
	// quarantine are the unowned active sessions that wait out the loss
	// quarantine: not a failure.
	quarantine quarantineView
}

// readFleet reads the placement, the sessions and the leases of the active
// ones, bounded by a.timeout.
func readFleet(ctx context.Context, a admin) (fleetRead, []session.Session, []session.Problem, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	pl, err := readPlacement(ctx, a.client, a.keys, a.store)
	if err != nil {
		return fleetRead{}, nil, nil, err
	}
	sessions, problems, err := a.store.List(ctx)
	if err != nil {
		return fleetRead{}, nil, nil, err
	}
	pl.learn(sessions)
	r := fleetRead{pl: pl, holdings: map[string]lease.Holding{}, unplaceable: map[string][]string{}}
	for _, s := range sessions {
		if s.Paused {
			continue
		}
		if sel := s.SelectorKey(); pl.Unplaceable(sel) {
			r.unplaceable[sel] = append(r.unplaceable[sel], s.ID)
			continue
		}
		r.active = append(r.active, s.ID)
	}
	if len(r.active) > 0 {
		hs, err := lease.Inspect(ctx, a.client, a.keys, r.active, 0)
		if err != nil {
			return fleetRead{}, nil, nil, err
		}
		for _, h := range hs {
			r.holdings[h.Session] = h
		}
	}
	if r.at, err = a.client.Time(ctx).Result(); err != nil {
		return fleetRead{}, nil, nil, fmt.Errorf("read the server clock: %w", err)
	}
	if r.quarantine, err = readQuarantine(ctx, a.client, a.keys, unownedOf(r.active, r.holdings), r.at); err != nil {
		return fleetRead{}, nil, nil, err
	}
	return r, sessions, problems, nil
}

// announceGrace is the shortest --grace that check announces: a shorter
// wait goes unnoticed.
const announceGrace = time.Second

// runChecks reads the fleet, waits grace, reads it again and verifies
// every invariant. A wait of announceGrace or more is announced on
// waiting first.
func runChecks(ctx context.Context, a admin, grace time.Duration, maxNotPlanned int, waiting io.Writer) (checkReport, error) {
	first, sessions, problems, err := readFleet(ctx, a)
	if err != nil {
		return checkReport{}, err
	}
	last := first
	if grace >= announceGrace {
		held := 0
		for _, h := range first.holdings {
			if h.Owner != "" {
				held++
			}
		}
		fmt.Fprintf(waiting, "pollworker: check: read %s, %s and %s; reading again in %v (--%s): "+
			"a session counts as without a lease only if it has none at both reads\n",
			plural(first.pl.Members.Len(), "live worker"), plural(len(first.active), "active session"),
			plural(held, "lease"), grace, flagGrace)
	}
	if grace > 0 {
		t := time.NewTimer(grace)
		select {
		case <-ctx.Done():
			t.Stop()
			return checkReport{}, ctx.Err()
		case <-t.C:
		}
		if last, sessions, problems, err = readFleet(ctx, a); err != nil {
			return checkReport{}, err
		}
	}
	r := checkReport{Checks: []string{}, Problems: []checkProblem{}, Notes: []string{},
		Workers: last.pl.Members.Len(), Sessions: len(last.active)}
	if grace == 0 {
		r.Notes = append(r.Notes, checkDuplicateID+": skipped with --grace 0 (it looks for leases renewed between two reads)")
	}
	r.Checks = append(r.Checks, checkHolderNotLive, checkPrevious, checkNoLease, checkNotPlanned, checkBadKey)
	if grace > 0 {
		r.Checks = append(r.Checks, checkDuplicateID)
	}
	var leaseProblems []checkProblem
	r.Leases, leaseProblems = checkLeases(first, last, maxNotPlanned, &r.Notes)
	r.Problems = append(r.Problems, leaseProblems...)
	r.Checks = append(r.Checks, checkUnplaceable)
	if !last.pl.Weights.Complete && len(sessions) > 0 {
		r.Notes = append(r.Notes, "poll loads: incomplete (an index written before loads were kept): the workers balance by session counts; pollworker sessions reweigh counts them")
	}
	for _, sel := range slices.Sorted(maps.Keys(last.unplaceable)) {
		ids := last.unplaceable[sel]
		if _, before := first.unplaceable[sel]; !before {
			continue // a worker may just be restarting: only what both reads saw
		}
		r.Problems = append(r.Problems, checkProblem{checkUnplaceable, fmt.Sprintf("selector %s: %d active sessions and no live worker whose labels match it: polled by nobody%s",
			sel, len(ids), sample(ids[:min(len(ids), maxProblemLines)], len(ids))), len(ids)})
	}

	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	known := make(map[string]struct{}, len(sessions)+len(problems))
	for _, s := range sessions {
		known[s.ID] = struct{}{}
	}
	for _, p := range problems {
		known[p.ID] = struct{}{}
	}
	unknown, err := findUnknownLeases(ctx, a.client, a.keys, known)
	if err != nil {
		return checkReport{}, err
	}
	if unknown.Scanned {
		r.Checks = append(r.Checks, checkUnknownSession)
		for _, l := range unknown.Lease {
			r.Problems = append(r.Problems, checkProblem{checkUnknownSession, fmt.Sprintf("session %s is not in the store, but its lease is held by %s (expires in %s)",
				l.Session, holderText(l.Holder, l.Incarnation), msDuration(l.ExpiresInMs)), 1})
		}
		if more := unknown.Count - len(unknown.Lease); more > 0 {
			r.Problems = append(r.Problems, checkProblem{checkUnknownSession, fmt.Sprintf("and %d more leases of sessions not in the store", more), more})
		}
	} else {
		r.Notes = append(r.Notes, checkUnknownSession+": skipped: "+unknown.Skipped)
	}

	policy, err := evictionPolicies(ctx, a.client)
	switch {
	case err != nil:
		r.Notes = append(r.Notes, checkEviction+": skipped: cannot read maxmemory-policy ("+firstLine(err.Error())+")")
	default:
		r.Checks = append(r.Checks, checkEviction)
		for _, p := range policy {
			r.Problems = append(r.Problems, checkProblem{checkEviction, p, 1})
		}
	}

	sizeProblems, err := checkIndex(ctx, a.client, a.keys)
	if err != nil {
		return checkReport{}, err
	}
	r.Checks = append(r.Checks, checkIndexSizes)
	r.Problems = append(r.Problems, sizeProblems...)
	stateProblems, err := corruptStates(ctx, a, sessions)
	if err != nil {
		return checkReport{}, err
	}
	r.Checks = append(r.Checks, checkCorruptState, checkJunkMember)
	r.Problems = append(r.Problems, stateProblems...)
	r.Problems = append(r.Problems, junkMembers(first.pl.Members, last.pl.Members)...)

	order := func(c string) int { return slices.Index(allChecks, c) }
	slices.SortStableFunc(r.Problems, func(x, y checkProblem) int { return order(x.Check) - order(y.Check) })
	slices.SortStableFunc(r.Checks, func(x, y string) int { return order(x) - order(y) })
	for _, p := range r.Problems {
		r.ProblemCount += p.Count
	}
	r.OK = len(r.Problems) == 0
	return r, nil
}

// checkLeases verifies the leases of the active sessions, from two reads
// (the same read twice with --grace 0): it returns the number of leases at
// the last read and the problems; a count under its bound goes to notes.
// Pure: it reads only first and last.
func checkLeases(first, last fleetRead, maxNotPlanned int, notes *[]string) (int, []checkProblem) {
	var probs []checkProblem
	lines := map[string]int{}
	add := func(check, detail string) {
		lines[check]++
		if lines[check] <= maxProblemLines {
			probs = append(probs, checkProblem{check, detail, 1})
		}
	}
	elapsed := last.at.Sub(first.at)
	// renewed: the same acquisition held the lease at both reads and its
	// TTL was set again in between.
	renewed := func(id string, h lease.Holding) bool {
		h0, ok := first.holdings[id]
		return elapsed > 0 && ok && h0.Owner == h.Owner && h.Remaining > h0.Remaining-elapsed+renewSlack
	}
	leases, notPlanned := 0, 0
	var notPlannedIDs []string
	unowned := 0
	for _, id := range last.active {
		h := last.holdings[id]
		if h.Bad != nil {
			add(checkBadKey, fmt.Sprintf("session %s: its %s key %s: %s; nobody acquires it until the key is repaired or deleted by hand", id, h.Bad.Role, h.Bad.Key, h.Bad.Problem))
			if h.Owner == "" {
				continue
			}
		}
		if h.Owner == "" && last.quarantine.holds(id) && last.pl.Members.Len() > 0 {
			continue // waits, and says so in a note
		}
		if h.Owner == "" && last.pl.Members.Len() == 0 {
			if first.holdings[id].Owner == "" {
				unowned++
			}
			continue
		}
		if h.Owner == "" {
			if h0 := first.holdings[id]; h0.Owner == "" {
				add(checkNoLease, fmt.Sprintf("session %s has no lease%s; planned owner %s", id, sinceText(elapsed), orNobody(last.pl.OwnerOf(id))))
			}
			continue
		}
		leases++
		o := lease.ParseOwner(h.Owner)
		live, current := last.pl.liveHolder(o.Holder, o.Incarnation)
		switch {
		case !live && renewed(id, h):
			add(checkHolderNotLive, fmt.Sprintf("session %s: lease held by %s, which is not live, yet renewed it during the check (it renews without heartbeating)",
				id, holderText(o.Holder, o.Incarnation)))
		case !live:
			add(checkHolderNotLive, fmt.Sprintf("session %s: lease held by %s, which is not live (nobody polls it until it expires in %s)",
				id, holderText(o.Holder, o.Incarnation), msDuration(h.Remaining.Milliseconds())))
		case !current && renewed(id, h):
			add(checkDuplicateID, fmt.Sprintf("id %s: its heartbeat is incarnation %s, but incarnation %s renewed the lease of session %s during the check: two processes run with this id",
				o.Holder, last.pl.Infos[o.Holder].Incarnation, o.Incarnation, id))
		case !current:
			add(checkPrevious, fmt.Sprintf("session %s: lease held by a previous incarnation %s of %s (nobody polls it until it expires in %s)",
				id, o.Incarnation, o.Holder, msDuration(h.Remaining.Milliseconds())))
		case last.pl.OwnerOf(id) != o.Holder:
			h0 := first.holdings[id]
			if h0.Owner == h.Owner && first.pl.OwnerOf(id) != o.Holder {
				notPlanned++
				if len(notPlannedIDs) < maxProblemLines {
					notPlannedIDs = append(notPlannedIDs, id)
				}
			}
		}
	}
	if last.quarantine.Count > 0 && last.pl.Members.Len() > 0 {
		*notes = append(*notes, checkNoLease+": not counted: "+last.quarantine.text())
	}
	if unowned > 0 {
		probs = append(probs, checkProblem{checkNoLease, fmt.Sprintf("no live worker: %d active sessions have no lease%s", unowned, sinceText(elapsed)), unowned})
	}
	for check, n := range lines {
		if n > maxProblemLines {
			probs = append(probs, checkProblem{check, fmt.Sprintf("and %d more", n-maxProblemLines), n - maxProblemLines})
		}
	}
	if notPlanned > 0 {
		text := fmt.Sprintf("%d leases held%s by a live worker the plan does not place them on (e.g. %s)", notPlanned, sinceText(elapsed), strings.Join(notPlannedIDs, ", "))
		if maxNotPlanned >= 0 && notPlanned > maxNotPlanned {
			probs = append(probs, checkProblem{checkNotPlanned, fmt.Sprintf("%s; at most %d allowed (--%s)", text, maxNotPlanned, flagMaxNotPlanned), notPlanned})
		} else {
			*notes = append(*notes, checkNotPlanned+": "+text)
		}
	}
	return leases, probs
}

// sinceText is " for at least 20s" for a positive elapsed time, "" else.
func sinceText(elapsed time.Duration) string {
	if elapsed <= 0 {
		return ""
	}
	return " for at least " + shortDuration(elapsed)
}

// holderText names a lease holder with its incarnation.
func holderText(holder, incarnation string) string {
	if incarnation == "" {
		return holder
	}
	return holder + " (incarnation " + incarnation + ")"
}

// evictionPolicies reads maxmemory-policy on every master and describes
// those that can evict leases (any but noeviction: leases have a TTL, so
// volatile-* policies take them too). It fails when CONFIG GET is refused.
func evictionPolicies(ctx context.Context, client redis.UniversalClient) ([]string, error) {
	var out []string
	one := func(ctx context.Context, c redis.Cmdable, where string) error {
		res, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return err
		}
		if p := res["maxmemory-policy"]; p != "" && p != "noeviction" {
			out = append(out, fmt.Sprintf("%smaxmemory-policy is %s: under memory pressure Redis may evict leases and fencing counters; set noeviction", where, p))
		}
		return nil
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		var mu sync.Mutex // ForEachMaster calls concurrently
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return one(ctx, c, c.Options().Addr+": ")
		})
		slices.Sort(out)
		return out, err
	}
	return out, one(ctx, client, "")
}

// checkIndex compares the index's bucket sizes hash with SCARD of every
// bucket set. A writer between the two reads can make a bucket differ
// for a moment: a bucket that differs is read again, and reported only if
// it still differs.
func checkIndex(ctx context.Context, client redis.UniversalClient, keys keyspace.Space) ([]checkProblem, error) {
	store, err := session.NewStore(client, keys)
	if err != nil {
		return nil, err
	}
	_, sizes, err := store.Sizes(ctx)
	if err != nil {
		return nil, err
	}
	buckets := make([]int, keyspace.SessionBuckets)
	for b := range buckets {
		buckets[b] = b
	}
	cards, err := scards(ctx, client, keys, buckets)
	if err != nil {
		return nil, err
	}
	var differ []int
	for b, n := range cards {
		if int(n) != sizes[b] {
			differ = append(differ, b)
		}
	}
	if len(differ) == 0 {
		return nil, nil
	}
	// Read the buckets that differ again, the hash after the sets.
	again, err := scards(ctx, client, keys, differ)
	if err != nil {
		return nil, err
	}
	if _, sizes, err = store.Sizes(ctx); err != nil {
		return nil, err
	}
	var probs []checkProblem
	n := 0
	for i, b := range differ {
		if int(again[i]) == sizes[b] {
			continue
		}
		if n++; n <= maxProblemLines {
			probs = append(probs, checkProblem{checkIndexSizes, fmt.Sprintf("bucket %d: the sizes hash (%s) says %d sessions, the set %s has %d",
				b, keys.SessionSizes(), sizes[b], keys.SessionBucket(b), again[i]), 1})
		}
	}
	if n > maxProblemLines {
		probs = append(probs, checkProblem{checkIndexSizes, fmt.Sprintf("and %d more buckets", n-maxProblemLines), n - maxProblemLines})
	}
	return probs, nil
}

// scards returns SCARD of the given index buckets, pipelined.
func scards(ctx context.Context, client redis.UniversalClient, keys keyspace.Space, buckets []int) ([]int64, error) {
	cmds := make([]*redis.IntCmd, len(buckets))
	_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range buckets {
			cmds[i] = p.SCard(ctx, keys.SessionBucket(b))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count the index buckets: %w", err)
	}
	out := make([]int64, len(buckets))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// printCheck prints one line per problem, the notes, and a summary.
func printCheck(w io.Writer, r checkReport) {
	for _, p := range r.Problems {
		fmt.Fprintf(w, "%s: %s\n", p.Check, p.Detail)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	verdict := "ok"
	if !r.OK {
		verdict = "FAIL: " + strconv.Itoa(r.ProblemCount) + " problems"
	}
	fmt.Fprintf(w, "%s: %d checks (%s); %d live workers, %d active sessions, %d leases\n",
		verdict, len(r.Checks), strings.Join(r.Checks, ", "), r.Workers, r.Sessions, r.Leases)
}
