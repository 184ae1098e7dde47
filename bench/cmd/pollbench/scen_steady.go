package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/internal/redisstats"
)

// runSteady counts Redis commands per second over windows in which nothing
// changes, for both designs with the same intervals.
func runSteady(ctx context.Context, e *env, sz sizes) ([]Row, error) {
	t := scaled(3 * sz.steadyInterval)
	var mix []string
	type rates struct{ cmds, trips, ops, cpu []float64 }
	measure := func(ms []*member) (rates, error) {
		var rt rates
		for r := 0; r < sz.runs; r++ {
			before, err := redisstats.Read(ctx, e.admin)
			if err != nil {
				return rt, err
			}
			c0, r0 := e.counter.Commands(), e.counter.RoundTrips()
			t0 := time.Now()
			select {
			case <-ctx.Done():
				return rt, ctx.Err()
			case <-time.After(sz.steadyWindow):
			}
			c1, r1 := e.counter.Commands(), e.counter.RoundTrips()
			after, err := redisstats.Read(ctx, e.admin)
			if err != nil {
				return rt, err
			}
			el := time.Since(t0).Seconds()
			d := after.Delta(before)
			rt.cmds = append(rt.cmds, float64(c1-c0)/el)
			rt.trips = append(rt.trips, float64(r1-r0)/el)
			rt.ops = append(rt.ops, float64(d.Calls())/el)
			rt.cpu = append(rt.cpu, 100*d.CPUSeconds/el)
			if r == 0 {
				mix = append(mix, topCommands(d, 4))
			}
		}
		return rt, nil
	}
	// Ours.
	f, err := e.startFleet(ctx, sz, sz.steadySessions, sz.steadyWorkers, time.Hour, t, nil)
	if err != nil {
		return nil, err
	}
	// After a change (here: the fleet forming) each worker checks the
	// sessions it would inherit at full rate for 3 × OrphanGrace (the
	// coordinator's default OrphanGrace is 2 × DiscoveryInterval); the
	// steady state starts after that.
	select {
	case <-ctx.Done():
		f.stop()
		return nil, ctx.Err()
	case <-time.After(3 * 2 * t.discovery):
	}
	ours, err := measure(f.members)
	f.stop()
	if err != nil {
		return nil, err
	}
	// Baseline.
	if err := e.reset(ctx); err != nil {
		return nil, err
	}
	if err := bench.Seed(ctx, e.admin, e.keys, bench.SequentialIDs(sz.steadySessions), time.Hour); err != nil {
		return nil, err
	}
	rec := bench.NewRecorder()
	var ms []*member
	for _, id := range workerIDs("b", sz.steadyWorkers) {
		ms = append(ms, e.startBaseline(id, t, rec))
	}
	defer func() { stopAll(ms) }()
	if err := settled(ctx, ms, rec, sz.steadySessions, sz.timeout+3*t.ttl); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	base, err := measure(ms)
	if err != nil {
		return nil, err
	}
	fig := fmt.Sprintf("%d sessions over %d workers, every %v", sz.steadySessions, sz.steadyWorkers, t.renew)
	row := func(name, unit string, o, b []float64, target float64, note string) Row {
		so, sb := bench.Summarize(o), bench.Summarize(b)
		r := Row{Figure: name + ", " + fig, Unit: unit, Ours: so, Base: &sb, BaseName: "naive", Ratio: sb.Median / so.Median, Note: note}
		if target > 0 {
			r.Target = fmt.Sprintf("≥ %.0f× fewer than baseline", target)
			r.Met = met(r.Ratio >= target)
		}
		return r
	}
	return []Row{
		row("steady-state commands/s sent to Redis", "cmd/s", ours.cmds, base.cmds, 20,
			fmt.Sprintf("counted by a client hook over %v windows (a pipeline counts each of its commands), from 3 × OrphanGrace after our fleet formed (when its post-change orphan watch has ended); renew, heartbeat and discovery intervals equal in both designs", sz.steadyWindow)),
		row("steady-state round trips/s", "rt/s", ours.trips, base.trips, 0, ""),
		row("steady-state Redis operations/s incl. inside scripts", "op/s", ours.ops, base.ops, 0,
			fmt.Sprintf("INFO commandstats, which also counts the commands scripts run; top: ours %s; naive %s", mix[0], mix[len(mix)-1])),
		row("steady-state Redis CPU", "%", ours.cpu, base.cpu, 0, "used_cpu_sys + used_cpu_user of redis-server over the window"),
	}, nil
}

// topCommands names the n most frequent commands of d with their share.
func topCommands(d redisstats.Stats, n int) string {
	type kv struct {
		name  string
		calls int64
	}
	var all []kv
	total := d.Calls()
	for k, v := range d.Commands {
		if k != "info" {
			all = append(all, kv{k, v.Calls})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].calls > all[j].calls })
	var parts []string
	for _, c := range all[:min(n, len(all))] {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", c.name, 100*float64(c.calls)/float64(max(total, 1))))
	}
	return strings.Join(parts, ", ")
}
