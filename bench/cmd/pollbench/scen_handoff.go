package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/internal/faultproxy"
	"github.com/pollworker/pollworker/poller"
)

// gapRows summarises per-run p50, p99 and max of a per-session gap.
type gapRuns struct{ p50, p99, max []float64 }

func (g *gapRuns) add(ms []float64) {
	s := bench.Summarize(ms)
	g.p50 = append(g.p50, s.Median)
	g.p99 = append(g.p99, s.P99)
	g.max = append(g.max, s.Max)
}

// fleetRun is one fleet of ours with sessions seeded and settled.
type fleetRun struct {
	members []*member
	rec     *bench.Recorder
}

func (e *env) startFleet(ctx context.Context, sz sizes, sessions, workers int, interval time.Duration,
	t timings, proxyFirst *faultproxy.Proxy) (*fleetRun, error) {
	if err := e.reset(ctx); err != nil {
		return nil, err
	}
	if err := bench.Seed(ctx, e.admin, e.keys, bench.SequentialIDs(sessions), interval); err != nil {
		return nil, err
	}
	f := &fleetRun{rec: bench.NewRecorder()}
	for i, id := range workerIDs("w", workers) {
		addr := ""
		if i == 0 && proxyFirst != nil {
			addr = proxyFirst.Addr()
		}
		m, err := e.startOurs(id, addr, t, f.rec)
		if err != nil {
			f.stop()
			return nil, err
		}
		f.members = append(f.members, m)
	}
	if err := settled(ctx, f.members, f.rec, sessions, sz.timeout); err != nil {
		f.stop()
		return nil, err
	}
	return f, nil
}

func (f *fleetRun) stop() { stopAll(f.members) }

// handoffInterval is the sessions' interval in the handoff scenario.
const handoffInterval = 10 * time.Second

// runHandoff cancels one of handoffWorkers coordinators and measures, for
// each of its sessions, how late the successor's first poll comes against
// the schedule it keeps (the old owner's last poll + the interval + the
// spread step); then,
// for reference, the baseline's time from the cancel to its successor's
// first poll (a handoff by expiry).
func runHandoff(ctx context.Context, e *env, sz sizes) ([]Row, error) {
	var ours gapRuns
	var drains []float64
	t := defaultTimings()
	t.ttl = sz.handoffTTL
	for r := 0; r < sz.runs; r++ {
		f, err := e.startFleet(ctx, sz, sz.handoffSessions, sz.handoffWorkers, handoffInterval, t, nil)
		if err != nil {
			return nil, err
		}
		victim := f.members[0]
		from := map[string]string{}
		for _, s := range victim.held() {
			from[s] = victim.id
		}
		drained := make(chan time.Time, 1)
		mark := time.Now()
		done := f.rec.Watch(mark, from, "")
		victim.cancel()
		go func() {
			err := <-victim.done
			drained <- time.Now()
			victim.done <- err // for stop
		}()
		err = waitChan(ctx, done, sz.timeout, "successors polled every handed-off session")
		drains = append(drains, float64((<-drained).Sub(mark))/float64(time.Millisecond))
		late := f.rec.Lateness(handoffInterval, poller.SpreadStep)
		_, _, missing := f.rec.Gaps()
		f.stop()
		if err != nil {
			return nil, fmt.Errorf("%w (%d of %d missing)", err, missing, len(from))
		}
		// The successor keeps the schedule: its first poll is due one
		// interval and the spread step after the last one; what counts is
		// how late it comes.
		ours.add(bench.Millis(late))
	}
	// Baseline: one run (its gap is the TTL plus up to one round).
	var base gapRuns
	bt := scaled(sz.baseHandoffTTL)
	if err := e.reset(ctx); err != nil {
		return nil, err
	}
	if err := bench.Seed(ctx, e.admin, e.keys, bench.SequentialIDs(sz.handoffSessions), handoffInterval); err != nil {
		return nil, err
	}
	rec := bench.NewRecorder()
	var ms []*member
	for _, id := range workerIDs("b", sz.handoffWorkers) {
		ms = append(ms, e.startBaseline(id, bt, rec))
	}
	defer func() { stopAll(ms) }()
	if err := settled(ctx, ms, rec, sz.handoffSessions, sz.timeout+3*bt.ttl); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	victim := ms[0]
	from := map[string]string{}
	for s, w := range rec.Owners() {
		if w == victim.id {
			from[s] = w
		}
	}
	mark := time.Now()
	done := rec.Watch(mark, from, "")
	_ = victim.stop()
	ms = ms[1:]
	if err := waitChan(ctx, done, sz.timeout+3*bt.ttl, "baseline successors polled"); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	gaps, _, _ := rec.Gaps()
	base.add(bench.Millis(gaps))

	label := fmt.Sprintf("naive, TTL %v", bt.ttl)
	fig := fmt.Sprintf("graceful handoff: successor's first poll late against the schedule (last poll + interval %v + spread step), %d sessions over %d workers, TTL %v",
		handoffInterval, sz.handoffSessions, sz.handoffWorkers, t.ttl)
	o50, o99, omax := bench.Summarize(ours.p50), bench.Summarize(ours.p99), bench.Summarize(ours.max)
	rows := []Row{
		{Figure: fig + ", p50", Unit: "ms", Ours: o50},
		{Figure: fig + ", p99", Target: "p99 < 250 ms", Unit: "ms", Ours: o99, Met: met(o99.Median < 250),
			Note: "against the schedule the old holder kept: its last poll + the interval + the spread step (poller.SpreadStep, at most interval/10) by which a session polled off its phase is moved later (a fleet that just started has every session still drifting to its phase)"},
		{Figure: fig + ", max", Unit: "ms", Ours: omax},
	}
	b99 := bench.Summarize(base.p99)
	rows = append(rows, Row{Figure: fmt.Sprintf("naive handoff by expiry: cancel → successor's first poll (%s), p99", label), Target: "reported", Unit: "ms",
		Ours: b99, Note: "the naive successor polls when the lease expires, whatever the session's schedule: early for a session whose interval is longer than the TTL"})
	rows = append(rows, Row{Figure: "graceful drain of the leaving worker (cancel → Run returned)", Target: "reported", Unit: "ms",
		Ours: bench.Summarize(drains)})
	return rows, nil
}

func gapRows(fig string, ours, base gapRuns, label string, p99Target float64) []Row {
	o50, o99, omax := bench.Summarize(ours.p50), bench.Summarize(ours.p99), bench.Summarize(ours.max)
	b50, b99, bmax := bench.Summarize(base.p50), bench.Summarize(base.p99), bench.Summarize(base.max)
	return []Row{
		{Figure: fig + ", p50", Unit: "ms", Ours: o50, Base: &b50, BaseName: label, Ratio: b50.Median / o50.Median},
		{Figure: fig + ", p99", Target: fmt.Sprintf("p99 < %.0f ms", p99Target), Unit: "ms", Ours: o99, Base: &b99, BaseName: label,
			Ratio: b99.Median / o99.Median, Met: met(o99.Median < p99Target)},
		{Figure: fig + ", max", Unit: "ms", Ours: omax, Base: &bmax, BaseName: label, Ratio: bmax.Median / omax.Median},
	}
}

// runCrash runs one of the coordinators through a TCP proxy and cuts it:
// the worker can neither renew nor release. It measures, per session, the
// time from the cut to the first poll by another worker, minus the TTL.
func runCrash(ctx context.Context, e *env, sz sizes) ([]Row, error) {
	var gap, over []float64
	t := scaled(sz.crashTTL)
	t.drain = time.Second
	var p50, p99, mx []float64
	for r := 0; r < sz.runs; r++ {
		proxy, err := faultproxy.Start(e.redis.Addr())
		if err != nil {
			return nil, err
		}
		f, err := e.startFleet(ctx, sz, sz.crashSessions, sz.handoffWorkers, time.Second, t, proxy)
		if err != nil {
			proxy.Close()
			return nil, err
		}
		victim := f.members[0]
		from := map[string]string{}
		for _, s := range victim.held() {
			from[s] = victim.id
		}
		mark := time.Now()
		done := f.rec.Watch(mark, from, "")
		proxy.Close()
		err = waitChan(ctx, done, sz.timeout, "survivors polled every crashed session")
		gaps, _, missing := f.rec.Gaps()
		f.stop()
		if err != nil {
			return nil, fmt.Errorf("%w (%d of %d missing)", err, missing, len(from))
		}
		ms := bench.Millis(gaps)
		s := bench.Summarize(ms)
		p50, p99, mx = append(p50, s.Median), append(p99, s.P99), append(mx, s.Max)
		gap = append(gap, s.P99)
		over = append(over, s.P99-float64(t.ttl.Milliseconds()))
	}
	_ = gap
	ttlMs := float64(t.ttl.Milliseconds())
	fig := fmt.Sprintf("crash failover gap, %d sessions over %d workers, TTL %v", sz.crashSessions, sz.handoffWorkers, t.ttl)
	o99 := bench.Summarize(p99)
	ov := bench.Summarize(over)
	return []Row{
		{Figure: fig + ", p50", Unit: "ms", Ours: bench.Summarize(p50)},
		{Figure: fig + ", p99", Target: fmt.Sprintf("≤ TTL + 1 s (%.0f ms)", ttlMs+1000), Unit: "ms", Ours: o99, Met: met(o99.Median <= ttlMs+1000),
			Note: "the proxy is cut right after the fleet settled, i.e. just after the victim acquired or renewed its leases: the worst phase, where the gap is a whole TTL; the baseline's crash gap is the same TTL expiry plus up to one discovery round and is not run here"},
		{Figure: fig + ", max", Unit: "ms", Ours: bench.Summarize(mx)},
		{Figure: "crash failover p99 gap − TTL", Target: "≤ 1000 ms", Unit: "ms", Ours: ov, Met: met(ov.Median <= 1000)},
	}, nil
}
