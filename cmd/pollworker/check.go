package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// exitUnhealthy is check's exit code when an invariant is broken; 1 still
// means that the check itself failed (Redis unreachable), 2 bad flags.
const exitUnhealthy = 3

// The invariants check verifies, by the names it reports them under.
const (
	checkHolderNotLive  = fleet.CheckHolderNotLive
	checkPrevious       = fleet.CheckPrevious
	checkDuplicateID    = fleet.CheckDuplicateID
	checkUnknownSession = "lease-of-unknown-session"
	checkNoLease        = fleet.CheckNoLease
	checkNotPlanned     = fleet.CheckNotPlanned
	checkEviction       = "eviction-policy"
	checkRedisMemory    = "redis-memory"
	checkIndexSizes     = "index-sizes"
	checkUnplaceable    = fleet.CheckUnplaceable
	checkBadKey         = fleet.CheckBadKey
	checkMalformed      = "malformed-session"
)

// allChecks lists them in the order they are reported.
var allChecks = []string{checkHolderNotLive, checkPrevious, checkDuplicateID, checkUnknownSession,
	checkNoLease, checkNotPlanned, checkUnplaceable, checkEviction, checkRedisMemory, checkIndexSizes, checkBadKey, checkMalformed, checkCorruptState, checkJunkMember}

// Flags of check.
const (
	flagGrace         = "grace"
	flagMaxNotPlanned = "max-not-planned"
)

// maxProblemLines bounds the lines one check prints; the rest are counted.
const maxProblemLines = fleet.MaxProblemLines

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
type checkProblem = fleet.Problem

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
			"  redis-memory                        Redis is at its maxmemory under noeviction: it refuses writes, so\n" +
			"                                      the workers take no session and session writes fail (INFO memory)\n" +
			"  unplaceable                         active sessions whose selector no live worker's labels match\n" +
			"                                      (polled by nobody; not also reported as session-without-lease)\n" +
			"  index-sizes                         the index's bucket sizes hash disagrees with SCARD of a bucket\n" +
			"  bad-key                             an active session's lease key, fencing counter or handoff mark is\n" +
			"                                      of the wrong type (or a counter not a decimal below 2^53-1): nobody\n" +
			"                                      acquires it until it is repaired by hand (not also session-without-lease)\n" +
			"  malformed-session                   a session's definition in the store cannot be decoded or breaks a rule:\n" +
			"                                      a worker stops polling it when it reads it again: at once after a change\n" +
			"                                      made with pollworker, within 2 minutes after one around it (redis-cli)\n" +
			"                                      (sessions list shows why)\n" +
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

// readFleet reads every session and the leases of the active ones
// (fleet.Reader.ReadAll), bounded by a.timeout.
func readFleet(ctx context.Context, a admin, r *fleet.Reader) (*fleet.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	return r.ReadAll(ctx)
}

// announceGrace is the shortest --grace that check announces: a shorter
// wait goes unnoticed.
const announceGrace = time.Second

// runChecks reads the fleet, waits grace, reads it again and verifies
// every invariant. A wait of announceGrace or more is announced on
// waiting first.
func runChecks(ctx context.Context, a admin, grace time.Duration, maxNotPlanned int, waiting io.Writer) (checkReport, error) {
	reader, err := newFleetReader(a, poller.DefaultLeaseTTL)
	if err != nil {
		return checkReport{}, err
	}
	first, err := readFleet(ctx, a, reader)
	if errors.Is(err, nodes.ErrWrongType) {
		return badFleetKey(err), nil
	}
	if err != nil {
		return checkReport{}, err
	}
	last := first
	if grace >= announceGrace {
		held := 0
		for _, id := range first.Placed() {
			if first.Sessions[id].Lease.Owner != "" {
				held++
			}
		}
		fmt.Fprintf(waiting, "pollworker: check: read %s, %s and %s; reading again in %v (--%s): "+
			"a session counts as without a lease only if it has none at both reads\n",
			plural(first.Members.Len(), "live worker"), plural(len(first.Placed()), "active session"),
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
		if last, err = readFleet(ctx, a, reader); errors.Is(err, nodes.ErrWrongType) {
			return badFleetKey(err), nil
		} else if err != nil {
			return checkReport{}, err
		}
	}
	r := checkReport{Checks: []string{}, Problems: []checkProblem{}, Notes: []string{},
		Workers: last.Members.Len(), Sessions: len(last.Placed())}
	if grace == 0 {
		r.Notes = append(r.Notes, checkDuplicateID+": skipped with --grace 0 (it looks for leases renewed between two reads)")
	}
	if r.Workers == 0 && len(last.Sessions) == 0 && len(last.Malformed) == 0 {
		// Nothing to check finds nothing wrong: say what was read, for a
		// mistyped --key-prefix, --session-prefix or database.
		r.Notes = append(r.Notes, fmt.Sprintf("nothing here: no live worker in %s and no session under the session prefix %s (check --key-prefix, --session-prefix and the database in --redis-url)",
			a.keys.NodeIndex(), a.keys.SessionNamespace()))
	} else if r.Workers > 0 && len(last.Sessions) == 0 && len(last.Malformed) == 0 {
		// Workers and no session: after a FLUSHALL or a restart without
		// persistence, or a mistyped --session-prefix here or there.
		r.Notes = append(r.Notes, fmt.Sprintf("no session: %d live workers, and the session index under %s is empty (Redis lost its data? apply the sessions again; or check --session-prefix)",
			r.Workers, a.keys.SessionNamespace()))
	}
	checked := fleet.Check(first, last, maxNotPlanned)
	r.Checks = append(r.Checks, checked.Checks...)
	r.Problems = append(r.Problems, checked.Problems...)
	r.Notes = append(r.Notes, checked.Notes...)
	r.Leases = checked.Leases
	sessions := last.Definitions()
	if !last.Weights.Complete && len(sessions) > 0 {
		r.Notes = append(r.Notes, "poll loads: incomplete (an index written before loads were kept): the workers balance by session counts; pollworker sessions reweigh counts them")
	}

	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	unknown, err := reader.UnknownLeases(ctx, last.Known, maxProblemLines)
	if err != nil {
		return checkReport{}, err
	}
	if unknown.Scanned {
		r.Checks = append(r.Checks, checkUnknownSession)
		for _, l := range unknown.Sample {
			r.Problems = append(r.Problems, checkProblem{Check: checkUnknownSession, Detail: fmt.Sprintf("session %s is not in the store, but its lease is held by %s (expires in %s)",
				l.Session, fleet.HolderText(l.Holder, l.Incarnation), fleet.MsDuration(l.Remaining.Milliseconds())), Count: 1})
		}
		if more := unknown.Count - len(unknown.Sample); more > 0 {
			r.Problems = append(r.Problems, checkProblem{Check: checkUnknownSession, Detail: fmt.Sprintf("and %d more leases of sessions not in the store", more), Count: more})
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
			r.Problems = append(r.Problems, checkProblem{Check: checkEviction, Detail: p, Count: 1})
		}
	}

	full, err := fullMasters(ctx, a.client)
	switch {
	case err != nil:
		r.Notes = append(r.Notes, checkRedisMemory+": skipped: cannot read INFO memory ("+firstLine(err.Error())+")")
	default:
		r.Checks = append(r.Checks, checkRedisMemory)
		for _, p := range full {
			r.Problems = append(r.Problems, checkProblem{Check: checkRedisMemory, Detail: p, Count: 1})
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
	r.Checks = append(r.Checks, checkMalformed, checkCorruptState, checkJunkMember)
	for i, m := range last.Malformed {
		if i == maxProblemLines {
			r.Problems = append(r.Problems, checkProblem{Check: checkMalformed, Detail: fmt.Sprintf("and %d more malformed sessions", len(last.Malformed)-i), Count: len(last.Malformed) - i})
			break
		}
		detail := fmt.Sprintf("session %s: %s: a worker stops polling it when it reads it again (within 2 minutes of a write around pollworker, as with redis-cli); write it again (sessions add --replace) or remove it", m.ID, firstLine(m.Err.Error()))
		if m.Bucket { // the error says what to do
			detail = fmt.Sprintf("%s; pollworker explain ID of a session indexed there says so", firstLine(m.Err.Error()))
		}
		r.Problems = append(r.Problems, checkProblem{Check: checkMalformed, Count: 1, Detail: detail})
	}
	r.Problems = append(r.Problems, stateProblems...)
	r.Problems = append(r.Problems, junkMembers(first.Members, last.Members)...)

	order := func(c string) int { return slices.Index(allChecks, c) }
	slices.SortStableFunc(r.Problems, func(x, y checkProblem) int { return order(x.Check) - order(y.Check) })
	slices.SortStableFunc(r.Checks, func(x, y string) int { return order(x) - order(y) })
	for _, p := range r.Problems {
		r.ProblemCount += p.Count
	}
	r.OK = len(r.Problems) == 0
	return r, nil
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
	err := eachMaster(ctx, client, one)
	slices.Sort(out)
	return out, err
}

// eachMaster calls one for every master of client, one at a time, with
// where naming the master under Cluster ("host:port: "), "" otherwise.
func eachMaster(ctx context.Context, client redis.UniversalClient, one func(ctx context.Context, c redis.Cmdable, where string) error) error {
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		return one(ctx, client, "")
	}
	var mu sync.Mutex // ForEachMaster calls concurrently
	return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		return one(ctx, c, c.Options().Addr+": ")
	})
}

// fullMasters reads INFO memory on every master and describes those at
// their maxmemory under noeviction: they refuse writes ("OOM command not
// allowed"), so no worker takes a session and session writes fail.
func fullMasters(ctx context.Context, client redis.UniversalClient) ([]string, error) {
	var out []string
	one := func(ctx context.Context, c redis.Cmdable, where string) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		if p := memoryProblem(info); p != "" {
			out = append(out, where+p)
		}
		return nil
	}
	err := eachMaster(ctx, client, one)
	slices.Sort(out)
	return out, err
}

// memoryProblem says, from an INFO memory reply, whether Redis is at its
// maxmemory under noeviction ("" when not, or when it has no maxmemory).
func memoryProblem(info string) string {
	field := func(name string) string {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
				return v
			}
		}
		return ""
	}
	used, err1 := strconv.ParseInt(field("used_memory"), 10, 64)
	limit, err2 := strconv.ParseInt(field("maxmemory"), 10, 64)
	if err1 != nil || err2 != nil || limit <= 0 || used < limit || field("maxmemory_policy") != "noeviction" {
		return ""
	}
	return fmt.Sprintf("Redis uses %d of its maxmemory %d bytes (noeviction): it refuses writes, so the workers take no session "+
		"and session writes fail; raise maxmemory or free memory", used, limit)
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
		if n >= 0 && int(n) != sizes[b] {
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
			probs = append(probs, checkProblem{Check: checkIndexSizes, Detail: fmt.Sprintf("bucket %d: the sizes hash (%s) says %d sessions, the set %s has %d (pollworker sessions reweigh rewrites the sizes)",
				b, keys.SessionSizes(), sizes[b], keys.SessionBucket(b), again[i]), Count: 1})
		}
	}
	if n > maxProblemLines {
		probs = append(probs, checkProblem{Check: checkIndexSizes, Detail: fmt.Sprintf("and %d more buckets", n-maxProblemLines), Count: n - maxProblemLines})
	}
	return probs, nil
}

// scards returns SCARD of the given index buckets, pipelined; -1 for a
// bucket key of the wrong type (reported as a malformed entry).
func scards(ctx context.Context, client redis.UniversalClient, keys keyspace.Space, buckets []int) ([]int64, error) {
	cmds := make([]*redis.IntCmd, len(buckets))
	_, _ = client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range buckets {
			cmds[i] = p.SCard(ctx, keys.SessionBucket(b))
		}
		return nil
	})
	out := make([]int64, len(buckets))
	for i, c := range cmds {
		n, err := c.Result()
		switch {
		case redis.HasErrorPrefix(err, "WRONGTYPE"):
			n = -1
		case err != nil:
			return nil, fmt.Errorf("count the index buckets: %w", err)
		}
		out[i] = n
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
