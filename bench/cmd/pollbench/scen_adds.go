package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/bench/internal/greedyplan"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// runAdds adds sessions one by one to a settled fleet (issue 10 item 3) and
// measures, from the fleet's own lease and poll history, how many existing
// sessions each addition moves to another worker, whether any session
// moves twice within a lease TTL, and whether the polls during the adds are
// exactly the due ones. The interval is long (addsInterval), so that every
// poll in the window is either due (an added session's first poll, or a
// scheduled poll of a session whose time came) or an extra one. Next to it,
// the planner alone (package assign) against the greedy policy it
// replaced, on the same ids and workers and on the reproduction.
func runAdds(ctx context.Context, e *env, sz sizes) ([]Row, error) {
	t := scaled(sz.addsTTL)
	var moves, maxMoves, minGap, ratio, extra []float64
	var last addsResult
	for r := 0; r < sz.runs; r++ {
		res, err := addsOnce(ctx, e, sz, t)
		if err != nil {
			return nil, err
		}
		last = res
		moves = append(moves, float64(res.moves)/float64(sz.addsCount))
		maxMoves = append(maxMoves, float64(res.maxMoves))
		if res.minGap > 0 {
			minGap = append(minGap, res.minGap.Seconds())
		}
		ratio = append(ratio, float64(res.polls)/float64(res.due))
		extra = append(extra, float64(res.polls-res.due))
	}
	fleet := fmt.Sprintf("%d sessions over %d workers, %d added one by one every %v (interval %v, lease TTL %v)",
		sz.addsSessions, sz.addsWorkers, sz.addsCount, sz.addsPace, sz.addsInterval, t.ttl)
	sm, smax, sgap := bench.Summarize(moves), bench.Summarize(maxMoves), bench.Summarize(minGap)
	sr, sx := bench.Summarize(ratio), bench.Summarize(extra)
	gapMet := len(minGap) == 0 || slices.Min(minGap) >= t.ttl.Seconds()
	gapNote := ""
	if len(minGap) == 0 {
		gapNote = "n/a: no session was acquired twice (nothing moved)"
	}
	noExtra := slices.Min(extra) == 0 && slices.Max(extra) == 0
	rows := []Row{
		{Figure: "sessions moved per session added, fleet, " + fleet, Target: "0 moves per add",
			Ours: sm, Met: met(sm.Max == 0),
			Note: fmt.Sprintf("a move is a lease acquisition (Observer.LeaseEvent) of a session by another worker than its holder (an added session's first acquisition is not one), from the first add to lease TTL + 2 discovery intervals after the last, on a fleet quiet for TTL + 1 discovery interval before (no hold-back in force); last run: %d moves of %d sessions, %d of them of sessions added in the run",
				last.moves, last.moved, last.addedMoves)},
		{Figure: "most moves of one session during the adds", Target: "≤ 1", Ours: smax, Met: met(smax.Max <= 1)},
		{Figure: "shortest time between two acquisitions of one session", Target: fmt.Sprintf("≥ lease TTL (%v)", t.ttl),
			Unit: "s", Ours: sgap, Met: met(gapMet), Note: gapNote},
		{Figure: "polls during the adds / due polls", Target: "= 1.00 (no extra polls)", Ours: sr, Met: met(noExtra),
			Note: fmt.Sprintf("due polls = first polls of the added sessions + scheduled polls that fell due in the window (every interval after a session's last poll); last run: %d polls, %d due (%d first polls, %d scheduled)",
				last.polls, last.due, sz.addsCount, last.due-sz.addsCount)},
		{Figure: "extra polls during the adds (polls − due polls)", Target: "0", Ours: sx, Met: met(noExtra)},
	}
	// The planner alone, ours against the previous policy: on the fleet's
	// ids and workers (what the fleet above should follow), and on the
	// issue's reproduction (3 workers, sessions added from none).
	type plannerCase struct {
		kind          string
		from, workers int
		ids           []string
	}
	cases := []plannerCase{
		{"sequential", sz.addsSessions, sz.addsWorkers, bench.SequentialIDs(sz.addsSessions + sz.addsCount)},
		{"uuid", sz.addsSessions, sz.addsWorkers, bench.UUIDs(sz.addsSessions + sz.addsCount)},
		{"sequential", 0, 3, bench.SequentialIDs(100)},
	}
	if sz.mode == "full" {
		cases = append(cases, plannerCase{"sequential", 0, 3, bench.SequentialIDs(2000)})
	}
	for i, c := range cases {
		note := ""
		if i == 0 {
			note = "pure placement, no fleet: per add, the sessions already placed whose bucket changed owner between the plans before and after it (assign.Plan, slack 0.05); the previous policy is the greedy bounded-load planner kept in internal/greedyplan; the first row uses the fleet's ids and workers, the uuid row random ids (new ones each run of pollbench), the last rows the issue's reproduction (3 workers, sessions added from none)"
		}
		ours, prev := plannerMovesPerAdd(c.ids, c.from, c.workers, poller.DefaultBalanceSlack)
		so, sp := bench.Summarize([]float64{ours}), bench.Summarize([]float64{prev})
		rows = append(rows, Row{
			Figure: fmt.Sprintf("sessions moved per session added, planner only, %s ids, %d → %d sessions over %d workers", c.kind, c.from, len(c.ids), c.workers),
			Target: "0 moves per add", Ours: so, Base: &sp, BaseName: "previous greedy", Ratio: sp.Median / so.Median, Met: met(so.Max == 0),
			Note: note,
		})
	}
	return rows, nil
}

// addsResult is what one run of the adds measured.
type addsResult struct {
	moves      int // acquisitions by another worker than the holder
	moved      int // distinct sessions moved
	addedMoves int // the moves of sessions added in this run
	maxMoves   int // most moves of one session
	minGap     time.Duration
	polls, due int
}

// addsLog is every poll and every lease acquisition of a fleet, in order.
type addsLog struct {
	mu       sync.Mutex
	polls    []addsEvent
	acquires []addsEvent
}

type addsEvent struct {
	session, worker string
	at              time.Time
}

func (l *addsLog) poll(s, w string) {
	now := time.Now()
	l.mu.Lock()
	l.polls = append(l.polls, addsEvent{s, w, now})
	l.mu.Unlock()
}

func (l *addsLog) acquired(s, w string, at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	l.mu.Lock()
	l.acquires = append(l.acquires, addsEvent{s, w, at})
	l.mu.Unlock()
}

func (l *addsLog) snapshot() (polls, acquires []addsEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.polls), slices.Clone(l.acquires)
}

func (l *addsLog) lastAcquire() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.acquires) == 0 {
		return time.Time{}
	}
	return l.acquires[len(l.acquires)-1].at
}

// addsOnce runs one fleet: seed, settle, stay quiet, add, observe.
func addsOnce(ctx context.Context, e *env, sz sizes, t timings) (addsResult, error) {
	var res addsResult
	if err := e.reset(ctx); err != nil {
		return res, err
	}
	ids := bench.SequentialIDs(sz.addsSessions + sz.addsCount)
	existing, added := ids[:sz.addsSessions], ids[sz.addsSessions:]
	if err := bench.Seed(ctx, e.admin, e.keys, existing, sz.addsInterval); err != nil {
		return res, err
	}
	rec, log := bench.NewRecorder(), &addsLog{}
	var ms []*member
	defer func() { stopAll(ms) }()
	for _, id := range workerIDs("w", sz.addsWorkers) {
		m, err := e.startOurs(id, "", t, rec, log)
		if err != nil {
			return res, err
		}
		ms = append(ms, m)
	}
	if err := settled(ctx, ms, rec, len(existing), sz.timeout); err != nil {
		return res, err
	}
	// Quiet: no acquisition for TTL + one discovery interval, so that every
	// lease is older than a TTL and the coordinator holds nothing back
	// (poller's settled): the adds meet a fleet free to rebalance.
	quiet := t.ttl + t.discovery
	if err := waitFor(ctx, sz.timeout+quiet, "a quiet fleet", func() bool {
		return time.Since(log.lastAcquire()) >= quiet
	}); err != nil {
		return res, err
	}

	store, err := session.NewStore(e.admin, e.keys, session.WithURLCheck(nil)) // bench:// targets
	if err != nil {
		return res, err
	}
	start := time.Now()
	addAt := make(map[string]time.Time, len(added))
	tick := time.NewTicker(sz.addsPace)
	defer tick.Stop()
	for i, id := range added {
		if i > 0 {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-tick.C:
			}
		}
		addAt[id] = time.Now()
		s := session.Session{ID: id, URL: "bench://" + id, Interval: session.Duration(sz.addsInterval)}
		if err := store.Put(ctx, s); err != nil {
			return res, err
		}
	}
	lastAdd := time.Now()
	if err := waitChan(ctx, rec.WaitPolled(len(ids)), sz.timeout, "every added session polled"); err != nil {
		return res, err
	}
	// A move for the bound may wait for its lease to be a TTL old, and is
	// then made in the next round: observe until that has passed.
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(time.Until(lastAdd.Add(t.ttl + 2*t.discovery))):
	}
	end := time.Now()
	polls, acquires := log.snapshot()
	res = analyzeAdds(polls, acquires, addAt, start, end, sz.addsInterval)
	return res, nil
}

// analyzeAdds counts, over [start, end], the moves and polls of the log.
func analyzeAdds(polls, acquires []addsEvent, addAt map[string]time.Time, start, end time.Time, interval time.Duration) addsResult {
	var res addsResult
	holder := map[string]addsEvent{} // session -> its last acquisition
	moves := map[string]int{}
	slices.SortStableFunc(acquires, func(a, b addsEvent) int { return a.at.Compare(b.at) })
	for _, a := range acquires {
		prev, held := holder[a.session]
		holder[a.session] = a
		if a.at.Before(start) || a.at.After(end) || !held {
			continue
		}
		if gap := a.at.Sub(prev.at); res.minGap == 0 || gap < res.minGap {
			res.minGap = gap
		}
		if prev.worker == a.worker {
			continue // taken again by its holder: no move
		}
		moves[a.session]++
		res.moves++
		if _, isAdded := addAt[a.session]; isAdded {
			res.addedMoves++
		}
	}
	res.moved = len(moves)
	for _, n := range moves {
		res.maxMoves = max(res.maxMoves, n)
	}
	// Due polls: each added session once at its addition and every
	// interval after; each other session every interval after its last
	// poll before start.
	lastBefore := map[string]time.Time{}
	for _, p := range polls {
		if p.at.Before(start) {
			lastBefore[p.session] = p.at
		} else if !p.at.After(end) {
			res.polls++
		}
	}
	dueAfter := func(from time.Time) int { return int(end.Sub(from) / interval) }
	for _, at := range addAt {
		res.due += 1 + dueAfter(at)
	}
	for s, at := range lastBefore {
		if _, isAdded := addAt[s]; !isAdded {
			res.due += dueAfter(at)
		}
	}
	return res
}

// plannerMovesPerAdd adds ids[n:] one by one to the sessions ids[:n] on
// the given workers and returns, for assign's planner and for the previous
// greedy one, the sessions already placed whose owner changed per session
// added.
func plannerMovesPerAdd(ids []string, n, workers int, slack float64) (ours, prev float64) {
	ws := workerIDs("w", workers)
	adds := len(ids) - n
	sizes := make([]int, assign.Buckets)
	for _, id := range ids[:n] {
		sizes[keyspace.BucketOf(id)]++
	}
	fleet := assign.NewFleetIDs(ws...)
	plan := fleet.Plan(sizes, slack)
	greedy := greedyOwners(ws, sizes)
	movedOurs, movedPrev := 0, 0
	for _, id := range ids[n:] {
		nb := keyspace.BucketOf(id)
		old := slices.Clone(sizes)
		sizes[nb]++
		next, nextGreedy := fleet.Plan(sizes, slack), greedyOwners(ws, sizes)
		for b := range assign.Buckets {
			if plan.Owner(b) != next.Owner(b) {
				movedOurs += old[b]
			}
			if greedy[b] != nextGreedy[b] {
				movedPrev += old[b]
			}
		}
		plan, greedy = next, nextGreedy
	}
	return float64(movedOurs) / float64(adds), float64(movedPrev) / float64(adds)
}

// greedyOwners is the placement before package assign
// (internal/greedyplan), over the index buckets.
func greedyOwners(ws []string, sizes []int) []string {
	keys := make([]string, len(sizes))
	for b := range keys {
		keys[b] = assign.BucketKey(b)
	}
	return greedyplan.Owners(ws, keys, sizes, 0.05)
}
