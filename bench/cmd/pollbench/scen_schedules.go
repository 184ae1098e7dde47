package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/internal/redisstats"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/schedule"
	"github.com/pollworker/pollworker/state"
)

// scheduleSizes are the schedules scenario's sizes: the session ids whose
// slots are spread, and the sessions whose slot state is written per run.
func scheduleSizes(sz sizes) (spread, batch int) {
	switch sz.mode {
	case "full":
		return 100_000, 10_000
	case "quick":
		return 100_000, 2_000
	}
	return 2_000, 200
}

// spreadCase is one schedule whose slots the scenario spreads.
type spreadCase struct {
	expr   string
	jitter time.Duration
}

// runSchedules measures issue 25's schedules at scale: how evenly many
// sessions' slot starts fall over a minute (each session's own Schedule,
// parsed for its id: H and jitter hash the id), and what Redis spends per
// slot on the slot state a holder writes (state.Store.SlotStarted before
// the poll, SlotFinished after it: two fenced scripts), from INFO
// commandstats and INFO cpu of the scenario's redis-server.
func runSchedules(ctx context.Context, e *env, sz sizes) ([]Row, error) {
	spread, batch := scheduleSizes(sz)
	var rows []Row
	for _, c := range []spreadCase{{"0 * * * * *", 0}, {"H * * * * *", 0}, {"H * * * * *", time.Second}} {
		ms10, sec, err := slotSpread(spread, c)
		if err != nil {
			return rows, err
		}
		name := fmt.Sprintf("%q", c.expr)
		if c.jitter > 0 {
			name += " jitter " + c.jitter.String()
		}
		rows = append(rows,
			Row{Figure: fmt.Sprintf("%s, %d sessions over a minute: busiest 10 ms / mean", name, spread), Target: "reported",
				Unit: "×", Ours: bench.Summarize([]float64{ms10})},
			Row{Figure: fmt.Sprintf("%s, %d sessions over a minute: busiest second / mean", name, spread), Target: "reported",
				Unit: "×", Ours: bench.Summarize([]float64{sec})})
	}
	cost, err := slotStateCost(ctx, e, sz.runs, batch)
	return append(rows, cost...), err
}

// slotSpread computes the start (slot + jitter offset) of every slot of n
// sessions' schedules in one minute, and returns the busiest 10 ms and the
// busiest second, each against the mean of its kind.
func slotSpread(n int, c spreadCase) (busiest10ms, busiestSecond float64, err error) {
	from := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	const buckets = int(time.Minute / (10 * time.Millisecond))
	counts := make([]int, buckets)
	starts := 0
	for i := range n {
		s, err := schedule.Parse(fmt.Sprintf("sess-%d", i), c.expr, "", c.jitter)
		if err != nil {
			return 0, 0, err
		}
		// Slots in (from - 1ns, from + 1 min - 1ns]: one minute's, from its
		// first instant; a start past the minute (jitter) wraps around.
		for _, slot := range s.Slots(from.Add(-time.Nanosecond), from.Add(time.Minute-time.Nanosecond), 1000) {
			at := s.Start(slot).Sub(from) % time.Minute
			counts[int(at/(10*time.Millisecond))]++
			starts++
		}
	}
	secs := make([]int, 60)
	top10 := 0
	for b, k := range counts {
		top10 = max(top10, k)
		secs[b/100] += k
	}
	topSec := 0
	for _, k := range secs {
		topSec = max(topSec, k)
	}
	if starts == 0 {
		return 0, 0, fmt.Errorf("schedules: %q has no slot in a minute", c.expr)
	}
	return float64(top10) / (float64(starts) / float64(buckets)), float64(topSec) / (float64(starts) / 60), nil
}

// slotStateCost takes the leases of n sessions and, runs times, records one
// slot started and finished for each (as the holders of n sessions do for
// one slot each, 32 at a time), and reports Redis's time in the scripts
// and its CPU per slot.
func slotStateCost(ctx context.Context, e *env, runs, n int) ([]Row, error) {
	if err := e.reset(ctx); err != nil {
		return nil, err
	}
	client := e.client("", 64)
	defer client.Close()
	m, err := lease.New(lease.Config{Client: client, Keys: e.keys, Holder: "scheduler", TTL: time.Minute})
	if err != nil {
		return nil, err
	}
	var leases []*lease.Lease
	for _, r := range m.Acquire(ctx, bench.SequentialIDs(n)) {
		if r.Lease == nil {
			return nil, fmt.Errorf("schedules: acquire %s: not acquired (%v)", r.Session, r.Err)
		}
		leases = append(leases, r.Lease)
	}
	store := state.NewStore(client, e.keys)
	// A first slot, not measured: loads the script and creates the state
	// keys, as a running fleet has them.
	slot := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	if err := writeSlots(ctx, store, leases, slot, 32); err != nil {
		return nil, err
	}
	var scriptUsec, cpuUsec, calls []float64
	for range runs {
		slot = slot.Add(time.Second)
		before, err := redisstats.Read(ctx, e.admin)
		if err != nil {
			return nil, err
		}
		if err := writeSlots(ctx, store, leases, slot, 32); err != nil {
			return nil, err
		}
		after, err := redisstats.Read(ctx, e.admin)
		if err != nil {
			return nil, err
		}
		d := after.Delta(before)
		sc := d.Scripts()
		scriptUsec = append(scriptUsec, float64(sc.Usec)/float64(n))
		cpuUsec = append(cpuUsec, d.CPUSeconds*1e6/float64(n))
		calls = append(calls, float64(sc.Calls)/float64(n)) // commandstats also counts the commands a script runs
	}
	note := fmt.Sprintf("%d sessions, one slot each per run, written by 32 goroutines: SlotStarted before the poll, SlotFinished after it "+
		"(the poll's own result and state cost what an interval poll's do)", n)
	return []Row{
		{Figure: "Redis time in the slot-state scripts per slot (commandstats)", Target: "reported", Unit: "µs",
			Ours: bench.Summarize(scriptUsec), Note: note},
		{Figure: "Redis CPU per slot (INFO cpu: scripts, network, everything)", Target: "reported", Unit: "µs",
			Ours: bench.Summarize(cpuUsec)},
		{Figure: "Redis script calls per slot", Target: "2 (one before the poll, one after)", Unit: "calls",
			Ours: bench.Summarize(calls), Met: met(bench.Summarize(calls).Max <= 2.01)},
	}, nil
}

// writeSlots records slot started then finished under each lease, with
// workers goroutines.
func writeSlots(ctx context.Context, store *state.Store, leases []*lease.Lease, slot time.Time, workers int) error {
	next := make(chan *lease.Lease)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for l := range next {
				if err := store.SlotStarted(ctx, l, slot); err != nil {
					errs <- err
					return
				}
				if err := store.SlotFinished(ctx, l, slot, "ok"); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for _, l := range leases {
		select {
		case next <- l:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil && len(errs) > 0 {
		err = <-errs
	}
	if err != nil {
		return fmt.Errorf("schedules: %w", err)
	}
	return nil
}
