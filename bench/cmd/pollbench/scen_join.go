package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/poller"
)

// runJoin starts a worker next to joinWorkers settled ones and measures, for
// each session of its share, the time from its start to its first poll of
// it, and the longest time any moved session went unpolled.
func runJoin(ctx context.Context, e *env, sz sizes) ([]Row, error) {
	var gaps, holes, late gapRuns
	var moved []float64
	t := defaultTimings()
	for r := 0; r < sz.runs; r++ {
		f, err := e.startFleet(ctx, sz, sz.joinSessions, sz.joinWorkers, sz.joinInterval, t, nil)
		if err != nil {
			return nil, err
		}
		ids := bench.SequentialIDs(sz.joinSessions)
		all := workerIDs("w", sz.joinWorkers+1)
		newID := all[len(all)-1]
		pref := assign.Owners(all, ids, poller.DefaultBalanceSlack)
		current := map[string]string{}
		for _, m := range f.members {
			for _, s := range m.held() {
				current[s] = m.id
			}
		}
		from := map[string]string{}
		for i, id := range ids {
			if pref[i] == newID {
				from[id] = current[id]
			}
		}
		moved = append(moved, float64(len(from))/(float64(len(ids))/float64(len(all))))
		mark := time.Now()
		done := f.rec.Watch(mark, from, newID)
		hb := make(chan time.Duration, 1)
		go func() { hb <- firstHeartbeat(ctx, e, newID, mark, sz.timeout) }()
		m, err := e.startOurs(newID, "", t, f.rec)
		if err != nil {
			f.stop()
			return nil, err
		}
		f.members = append(f.members, m)
		err = waitChan(ctx, done, sz.timeout, "the newcomer polled its share")
		g, h, missing := f.rec.Gaps()
		f.stop()
		if err != nil {
			return nil, fmt.Errorf("%w (%d of %d missing)", err, missing, len(from))
		}
		off := <-hb
		for i := range g {
			g[i] -= off
		}
		gaps.add(bench.Millis(g))
		holes.add(bench.Millis(h))
		l := make([]time.Duration, len(h))
		for i := range h {
			l[i] = h[i] - sz.joinInterval
		}
		late.add(bench.Millis(l))
	}
	fig := fmt.Sprintf("join rebalance, %d sessions, %d → %d workers: first heartbeat → newcomer's first poll", sz.joinSessions, sz.joinWorkers, sz.joinWorkers+1)
	g99, gmax := bench.Summarize(gaps.p99), bench.Summarize(gaps.max)
	hmax := bench.Summarize(holes.max)
	limit := float64((sz.joinInterval + 250*time.Millisecond).Milliseconds())
	return []Row{
		{Figure: fig + ", p50", Unit: "ms", Ours: bench.Summarize(gaps.p50)},
		{Figure: fig + ", p99", Target: "reported", Unit: "ms", Ours: g99,
			Note: "measured from the moment the newcomer's entry appears in the node index (watched every millisecond); a handoff keeps the session's schedule, so the newcomer's first poll of a session comes when it is due, up to one interval after the join"},
		{Figure: fig + ", max", Unit: "ms", Ours: gmax},
		{Figure: "moved session polled late against its schedule (last poll + interval → newcomer's first poll), p99", Target: "p99 < 250 ms",
			Unit: "ms", Ours: bench.Summarize(late.p99), Met: met(bench.Summarize(late.p99).Median < 250),
			Note: "includes the spread step (at most min(interval/10, 200 ms)) of sessions still drifting to their phase"},
		{Figure: fmt.Sprintf("longest unpolled time of a moved session (interval %v)", sz.joinInterval), Target: fmt.Sprintf("≤ interval + 250 ms (%.0f ms)", limit),
			Unit: "ms", Ours: hmax, Met: met(hmax.P99 <= limit)},
		{Figure: "sessions moved to the newcomer / ideal (bounded HRW)", Target: "≤ 1.05", Ours: bench.Summarize(moved), Met: met(bench.Summarize(moved).Max <= 1.05)},
	}, nil
}

// firstHeartbeat returns how long after mark the worker id first appeared in
// the node index, watching it every millisecond; 0 if it never did.
func firstHeartbeat(ctx context.Context, e *env, id string, mark time.Time, timeout time.Duration) time.Duration {
	deadline := mark.Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if err := e.admin.ZScore(ctx, e.keys.NodeIndex(), id).Err(); err == nil {
			return time.Since(mark)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Millisecond):
		}
	}
	return 0
}
