package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pollworker/pollworker/bench"
)

// runCold seeds coldSessions sessions, starts coldWorkers coordinators at
// once and measures the time until every session has been polled, and the
// Redis memory per session (definition, index entry, lease and fence).
func runCold(ctx context.Context, e *env, sz sizes) ([]Row, error) {
	var secs, mem []float64
	for r := 0; r < sz.coldRuns; r++ {
		if err := e.reset(ctx); err != nil {
			return nil, err
		}
		before, err := bench.ReadStats(ctx, e.admin)
		if err != nil {
			return nil, err
		}
		if err := bench.Seed(ctx, e.admin, e.keys, bench.SequentialIDs(sz.coldSessions), time.Hour); err != nil {
			return nil, err
		}
		rec := bench.NewRecorder()
		all := rec.WaitPolled(sz.coldSessions)
		t0 := time.Now()
		var ms []*member
		for _, id := range workerIDs("w", sz.coldWorkers) {
			m, err := e.startOurs(id, "", defaultTimings(), rec)
			if err != nil {
				stopAll(ms)
				return nil, err
			}
			ms = append(ms, m)
		}
		err = waitChan(ctx, all, sz.timeout, "every session polled")
		el := time.Since(t0)
		if err == nil {
			after, serr := bench.ReadStats(ctx, e.admin)
			if serr == nil {
				mem = append(mem, float64(after.UsedMemory-before.UsedMemory)/float64(sz.coldSessions))
			}
		}
		stopAll(ms)
		if err != nil {
			return nil, fmt.Errorf("%w (%d of %d polled)", err, rec.Polled(), sz.coldSessions)
		}
		secs = append(secs, el.Seconds())
	}
	s := bench.Summarize(secs)
	coldMet := met(s.Median < 20)
	if sz.coldSessions < 1_000_000 || sz.coldWorkers < 50 {
		coldMet = "n/a (target is for 1M over 50)"
	}
	return []Row{
		{Figure: fmt.Sprintf("cold start, %d sessions over %d workers: all polled", sz.coldSessions, sz.coldWorkers),
			Target: "1M over 50 in < 20 s", Unit: "s", Ours: s, Met: coldMet,
			Note: fmt.Sprintf("%d runs; each worker reads the ids and definitions of its own index buckets only (≤ 20k definitions per round, leases in requests of 1000); all workers and redis-server share the machine's cores", sz.coldRuns)},
		{Figure: "Redis memory per session (definition + index + lease + fence)", Target: "reported", Unit: "B", Ours: bench.Summarize(mem)},
	}, nil
}
