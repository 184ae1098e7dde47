package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/internal/redisstats"
	"github.com/pollworker/pollworker/poller"
)

// The stages of the e2e scenario and the rows they report.

func (x *e2e) run(ctx context.Context) ([]Row, error) {
	var rows []Row
	var errs []error
	keptAt := map[int]float64{} // median polls/s ÷ sessions/s of ours
	for _, n := range x.sz.perWorker {
		var o, l, lx, ls []e2eRun
		var side []sideRun
		// At the first size, where polls come furthest apart, also the
		// limit+XADD on the worker's timer slack (poller.TimerSlack): what
		// the slack alone saves.
		slack := time.Duration(0)
		if n == x.sz.perWorker[0] {
			slack = min(poller.TimerSlack, x.sz.interval/100)
		}
		// Interleaved, so that a change in what else loads the shared
		// machine falls on all of them alike.
		for range x.sz.runs {
			if r, err := x.ours(ctx, n, "all"); err != nil {
				errs = append(errs, fmt.Errorf("ours at %d: %w", n, err))
			} else {
				o = append(o, r)
			}
			if r, err := x.limit(ctx, n, false, 0); err != nil {
				errs = append(errs, fmt.Errorf("limit at %d: %w", n, err))
			} else {
				l = append(l, r)
			}
			if r, err := x.limit(ctx, n, true, 0); err != nil {
				errs = append(errs, fmt.Errorf("limit+XADD at %d: %w", n, err))
			} else {
				lx = append(lx, r)
			}
			if slack > 0 {
				if r, err := x.limit(ctx, n, true, slack); err != nil {
					errs = append(errs, fmt.Errorf("limit+XADD with slack at %d: %w", n, err))
				} else {
					ls = append(ls, r)
				}
			}
			// At the first size, also the three side by side (the machine
			// has room for them there; further up they would share too
			// few cores to keep up).
			if n == x.sz.perWorker[0] {
				if r, err := x.sideBySide(ctx, n); err != nil {
					errs = append(errs, fmt.Errorf("side by side at %d: %w", n, err))
				} else {
					side = append(side, r)
				}
			}
			if ctx.Err() != nil {
				return rows, ctx.Err()
			}
		}
		if len(o) > 0 {
			keptAt[n] = over(o, func(r e2eRun) float64 { return r.st.perSec / float64(r.n) }).Median
		}
		rows = append(rows, x.compareRows(n, o, l, lx, ls, slack)...)
		if len(side) > 0 {
			rows = append(rows, sideRow(n, side))
		}
	}

	// The sustainable sessions per worker: the most it kept up with, below
	// the first size it did not.
	sustained, failed := 0, 0
	for _, n := range x.sz.perWorker {
		k, ok := keptAt[n]
		switch {
		case !ok || failed > 0:
		case k >= 0.98:
			sustained = n
		default:
			failed = n
		}
	}
	tried := fmt.Sprint(x.sz.perWorker)
	if x.sz.refine && sustained > 0 && failed > 0 && failed-sustained > 1000 {
		mid := (sustained + failed) / 2 / 1000 * 1000
		if o, err := x.ours(ctx, mid, "all"); err != nil {
			errs = append(errs, fmt.Errorf("ours at %d: %w", mid, err))
		} else {
			tried += fmt.Sprintf(", then %d (polls/s ÷ sessions/s %.3f)", mid, o.st.perSec/float64(mid))
			if o.keptUp() {
				sustained = mid
			}
		}
	}
	if sustained > 0 {
		rows = append(rows, Row{Figure: "sustainable sessions per worker here (most kept up: polls/s ≥ 0.98 × sessions/s)",
			Target: "reported", Ours: one(float64(sustained)), Unit: "sessions",
			Note: "sizes tried: " + tried + "; the first size not kept up ends the search"})
	}
	if x.sz.overload && sustained > 0 {
		for _, f := range []float64{1.5, 2} {
			n := int(f * float64(sustained))
			o, err := x.ours(ctx, n, "all")
			if err != nil {
				errs = append(errs, fmt.Errorf("overload at %d: %w", n, err))
				continue
			}
			rows = append(rows, overloadRows(f, n, sustained, o)...)
			// The same sessions over a fleet on this machine, right after.
			if w := x.sz.fleetVsOne; f == 2 && w > 0 {
				fr, err := x.fleetVsOne(ctx, w, n, o)
				rows = append(rows, fr...)
				if err != nil {
					errs = append(errs, fmt.Errorf("fleet of %d vs one at %d: %w", w, n, err))
				}
			}
		}
	}
	if n, w := x.sz.fleetVsOneAt, x.sz.fleetVsOne; n > 0 && w > 0 {
		o, err := x.ours(ctx, n, "all")
		if err != nil {
			errs = append(errs, fmt.Errorf("one worker at %d: %w", n, err))
		} else {
			fr, err := x.fleetVsOne(ctx, w, n, o)
			rows = append(rows, fr...)
			if err != nil {
				errs = append(errs, fmt.Errorf("fleet of %d vs one at %d: %w", w, n, err))
			}
		}
	}
	if n := x.sz.changesAt; n > 0 {
		o, err := x.ours(ctx, n, "changes")
		if err != nil {
			errs = append(errs, fmt.Errorf("--record changes at %d: %w", n, err))
		} else {
			rows = append(rows,
				Row{Figure: fmt.Sprintf("--record changes, %d sessions: Redis writes (XADD) per unchanged poll", n), Target: "0",
					Ours: one(o.xaddPerPoll), Met: met(o.xaddPerPoll == 0),
					Note: fmt.Sprintf("every poll answers 200, so every poll after a session's first is unchanged; pollworker_results_unchanged_total %.0f, pollworker_results_written_total %.0f",
						sumMetric(o.metrics, "pollworker_results_unchanged_total"), sumMetric(o.metrics, "pollworker_results_written_total"))},
				Row{Figure: fmt.Sprintf("--record changes, %d sessions: Redis round trips per poll", n), Target: "≤ 0.05",
					Ours: one(o.rtPerPoll), Met: met(o.rtPerPoll <= 0.05)})
		}
	}
	if x.sz.fleetWorkers > 0 {
		pers := []int{x.sz.fleetSessions}
		// And a fleet this machine can poll, when the first is more.
		if fit := sustained / x.sz.fleetWorkers / 100 * 100; fit > 0 && fit < x.sz.fleetSessions {
			pers = append(pers, fit)
		}
		for _, per := range pers {
			fr, err := x.fleet(ctx, per)
			rows = append(rows, fr...)
			if err != nil {
				errs = append(errs, fmt.Errorf("fleet of %d × %d: %w", x.sz.fleetWorkers, per, err))
			}
		}
	}
	return rows, errors.Join(errs...)
}

func one(v float64) bench.Summary { return bench.Summarize([]float64{v}) }

// over summarizes f over runs (NaN without runs).
func over(runs []e2eRun, f func(e2eRun) float64) bench.Summary {
	xs := make([]float64, 0, len(runs))
	for _, r := range runs {
		xs = append(xs, f(r))
	}
	return bench.Summarize(xs)
}

// compareRows are the figures of ours and the limit at n sessions, the
// median and p99 over the runs of each; ls are the runs of the limit+XADD
// on the timer slack slack, if any.
// pairedRatios lists, run by run, f of ours against f of the limit run
// next to it: "210/200 µs = 1.05×, ...".
func pairedRatios(o, l []e2eRun, f func(e2eRun) float64) string {
	var parts []string
	for i := range min(len(o), len(l)) {
		a, b := f(o[i]), f(l[i])
		parts = append(parts, fmt.Sprintf("%.1f/%.1f µs = %.2f×", a, b, a/b))
	}
	return strings.Join(parts, ", ")
}

func (x *e2e) compareRows(n int, o, l, lx, ls []e2eRun, slack time.Duration) []Row {
	at := fmt.Sprintf("%d sessions, 1 worker", n)
	row := func(fig, target, unit string, f func(e2eRun) float64, within float64, note string) Row {
		ours, base := over(o, f), over(lx, f)
		r := Row{Figure: fig + ", " + at, Target: target, Unit: unit, Ours: ours, Base: &base, BaseName: "limit+XADD",
			Ratio: base.Median / ours.Median, Note: note}
		if within > 0 {
			r.Met = met(ours.Median <= within*base.Median)
		}
		return r
	}
	m := func(runs []e2eRun, f func(e2eRun) float64) float64 { return over(runs, f).Median }
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	cpu := func(r e2eRun) float64 { return r.cpuPerPoll }
	rss := func(r e2eRun) float64 { return mb(r.rss) }
	hwm := func(r e2eRun) float64 { return mb(r.hwm) }
	conns := func(r e2eRun) float64 { return float64(r.conns) }
	rt := func(r e2eRun) float64 { return r.rtPerPoll }
	rcpu := func(r e2eRun) float64 { return r.redisPerPol }
	slot := func(r e2eRun) float64 { return r.st.busiestSlot }
	late := func(r e2eRun) float64 { return r.st.lateP99 }
	lateFirst := func(r e2eRun) float64 { return r.st.lateFirstP99 }
	kept := func(r e2eRun) float64 { return r.st.perSec / float64(r.n) }
	pct := func(f func(e2eRun) float64) string {
		return fmt.Sprintf("%.0f / %.0f / %.0f", m(o, f), m(lx, f), m(l, f))
	}
	metric := func(name string) float64 {
		return m(o, func(r e2eRun) float64 { return sumMetric(r.metrics, name) })
	}

	rows := []Row{
		row("worker CPU per poll", "≤ 1.5× limit+XADD", "µs", cpu, 1.5,
			fmt.Sprintf("limit alone %.1f µs; per run, worker / limit alone (run one after the other): %s; %% of one core in the window (worker / limit+XADD / limit): the poller %s, redis-server %s, pollbench (target + proxy) %s, the whole machine (2 cores = 200, other work included) %s",
				m(l, cpu), pairedRatios(o, l, cpu), pct(func(r e2eRun) float64 { return r.cpuPct }), pct(func(r e2eRun) float64 { return r.redisPct }),
				pct(func(r e2eRun) float64 { return r.benchPct }), pct(func(r e2eRun) float64 { return r.machinePct }))),
		row("worker RSS (VmRSS, end of window)", "≤ 3× limit+XADD", "MB", rss, 3,
			fmt.Sprintf("VmHWM: worker %.1f MB, limit+XADD %.1f MB, limit %.1f MB; limit alone VmRSS %.1f MB; the worker's Go heap in use %.1f MB, heap objects %.0f, goroutines %.0f (its /metrics)",
				m(o, hwm), m(lx, hwm), m(l, hwm), m(l, rss), metric("go_memstats_heap_inuse_bytes")/(1<<20), metric("go_memstats_heap_objects"), metric("go_goroutines"))),
		row("connections open to the target (most during the window)", "≤ 2× limit+XADD", "conns", conns, 2,
			fmt.Sprintf("limit alone %.0f", m(l, conns))),
		row("Redis round trips per poll", "≤ 0.05", "", rt, 0,
			fmt.Sprintf("counted by the proxy: all of the worker's Redis traffic (leases, heartbeats, rounds, results); XADD per poll: worker %.3f, limit+XADD %.3f",
				m(o, func(r e2eRun) float64 { return r.xaddPerPoll }), m(lx, func(r e2eRun) float64 { return r.xaddPerPoll }))),
		row("Redis CPU per poll", "≤ 1.5× limit+XADD", "µs", rcpu, 1.5,
			fmt.Sprintf("INFO cpu delta over the window / polls; limit alone %.2f µs (the INFO calls and the server's own cron)", m(l, rcpu))),
		row("arrivals in the busiest 10 ms slot / mean slot", "≤ 1.5× limit+XADD", "", slot, 1.5, fmt.Sprintf("limit alone %.2f", m(l, slot))),
		row("lateness vs the session's grid, p99", "reported", "ms", late, 0,
			fmt.Sprintf("grid = the session's first poll in the last interval before the window + k × interval; limit alone %.2f ms; against the session's very first poll instead: worker %.1f ms, limit+XADD %.1f ms, limit %.1f ms",
				m(l, late), m(o, lateFirst), m(lx, lateFirst), m(l, lateFirst))),
		row("polls/s ÷ sessions/s (kept up ≥ 0.98)", "≥ 0.98 where the limit keeps up", "", kept, 0,
			fmt.Sprintf("limit alone %.3f; process start → every session polled once: worker %.2f s, limit+XADD %.2f s, limit %.2f s; worker since start (median of runs): polls late %.0f, deferred %.0f, results dropped %.0f",
				m(l, kept), m(o, func(r e2eRun) float64 { return r.start.Seconds() }), m(lx, func(r e2eRun) float64 { return r.start.Seconds() }),
				m(l, func(r e2eRun) float64 { return r.start.Seconds() }),
				metric("pollworker_polls_late_total"), metric("pollworker_polls_deferred_total"), metric("pollworker_results_dropped_total"))),
	}
	if len(ls) > 0 {
		onSlack := func(v float64, unit string) string {
			return fmt.Sprintf("; limit+XADD with the worker's timer slack (firing up to %v after a poll is due, as poller.TimerSlack): %.1f %s [runs: %d]",
				slack, v, unit, len(ls))
		}
		rows[0].Note += onSlack(m(ls, cpu), "µs")
		rows[6].Note += onSlack(m(ls, late), "ms")
	}
	rt0, late0, kept0 := &rows[3], &rows[6], &rows[7]
	rt0.Met = met(rt0.Ours.Median <= 0.05)
	if n == 5000 {
		late0.Target, late0.Met = "≤ 10 ms at 5k", met(late0.Ours.Median <= 10)
	}
	kept0.Met = met(kept0.Ours.Median >= 0.98 || !(kept0.Base.Median >= 0.98))
	if x.sz.runs > 1 {
		for i := range rows {
			rows[i].Note += fmt.Sprintf(" [runs: worker %d, limit+XADD %d, limit %d]", len(o), len(lx), len(l))
		}
	}
	return rows
}

// overloadRows are the figures of one worker at n = f × sustained sessions.
func overloadRows(f float64, n, sustained int, o e2eRun) []Row {
	at := fmt.Sprintf("overload %.1f× (%d sessions, 1 worker)", f, n)
	tput := 100 * o.st.perSec / float64(sustained)
	renewErr := sumMetric(o.metrics, "pollworker_redis_errors_total", `op="renew"`)
	uncertain := sumMetric(o.metrics, "pollworker_lease_events_total", `event="uncertain"`)
	lost := sumMetric(o.metrics, "pollworker_lease_events_total", `event="lost"`)
	held := sumMetric(o.metrics, "pollworker_leases_held")
	notHeld := float64(n) - held
	note := fmt.Sprintf("polls/s %.0f; worker CPU %.0f%% of a core, redis-server %.0f%%, pollbench (target + proxy) %.0f%%; since start: polls late %.0f, deferred %.0f, waiting now %.0f, results dropped %.0f, polls by outcome ok %.0f / error %.0f; renew round trip: %s",
		o.st.perSec, o.cpuPct, o.redisPct, o.benchPct,
		sumMetric(o.metrics, "pollworker_polls_late_total"), sumMetric(o.metrics, "pollworker_polls_deferred_total"),
		sumMetric(o.metrics, "pollworker_polls_waiting"), sumMetric(o.metrics, "pollworker_results_dropped_total"),
		sumMetric(o.metrics, "pollworker_polls_total", `outcome="ok"`), sumMetric(o.metrics, "pollworker_polls_total", `outcome="error"`),
		renewRoundTrip(o.metrics))
	return []Row{
		{Figure: at + ": throughput / sustainable rate", Target: "≥ 90 %", Unit: "%", Ours: one(tput), Met: met(tput >= 90), Note: note},
		{Figure: at + ": renewal errors + leases made uncertain", Target: "0", Ours: one(renewErr + uncertain), Met: met(renewErr+uncertain == 0),
			Note: fmt.Sprintf("pollworker_redis_errors_total{op=renew} %.0f, pollworker_lease_events_total{event=uncertain} %.0f", renewErr, uncertain)},
		{Figure: at + ": leases not Held at the end of the window", Target: "0", Ours: one(notHeld), Met: met(notHeld == 0 && lost == 0),
			Note: fmt.Sprintf("sessions − pollworker_leases_held; leases lost since start %.0f", lost)},
	}
}

// renewRoundTrip is the mean renewal cycle from the histogram.
func renewRoundTrip(m map[string]float64) string {
	s := sumMetric(m, "pollworker_renew_round_trip_seconds_sum")
	c := sumMetric(m, "pollworker_renew_round_trip_seconds_count")
	if c == 0 {
		return "no cycle"
	}
	return fmt.Sprintf("mean %.1f ms over %.0f cycles", 1000*s/c, c)
}

// fleet runs workers × per sessions over fleetWorkers workers, adds
// sessions one by one with `pollworker sessions add`, then sends SIGTERM
// to one worker.
func (x *e2e) fleet(ctx context.Context, per int) ([]Row, error) {
	w := x.sz.fleetWorkers
	n := w * per
	at := fmt.Sprintf("%d workers × %d sessions", w, per)
	procs, mark, err := x.startFleet(ctx, w, n, nil)
	defer stopProcs(procs)
	if err != nil {
		return nil, err
	}
	st, load, err := x.measureFleet(ctx, procs, mark, min(x.sz.window, 5*time.Second))
	if err != nil {
		return nil, err
	}
	rows := []Row{{Figure: "fleet, " + at + ": polls/s ÷ sessions/s", Target: "≥ 0.98", Ours: one(st.perSec / float64(n)),
		Met: met(st.perSec >= 0.98*float64(n)), Note: fmt.Sprintf("busiest/mean 10 ms slot %.2f, lateness p99 %.1f ms; %s", st.busiestSlot, st.lateP99, load())}}

	// Sessions added one by one with the CLI: from the start of
	// `pollworker sessions add` to the first poll at the target.
	addIDs := e2eIDs("e2e-add", x.sz.adds)
	added := map[string]time.Duration{}
	var cli []float64
	for _, id := range addIDs {
		t0 := x.target.now()
		out, err := exec.CommandContext(ctx, x.bin, "sessions", "add", "--id", id, "--url", x.target.urlPrefix()+id,
			"--interval", x.sz.interval.String(), "--redis-url", "redis://"+x.e.redis.Addr()+"/0").CombinedOutput()
		if err != nil {
			return rows, fmt.Errorf("sessions add: %w: %s", err, out)
		}
		added[id] = t0
		cli = append(cli, float64(x.target.now()-t0)/float64(time.Millisecond))
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return rows, err
		}
	}
	_ = waitFor(ctx, 5*time.Second, "added sessions polled", func() bool {
		return x.target.polled(mark, "") >= n+len(addIDs)
	})
	firstAt := map[string]time.Duration{}
	for _, a := range x.target.since(mark) {
		if t0, ok := added[a.session]; ok && a.at >= t0 {
			if _, seen := firstAt[a.session]; !seen {
				firstAt[a.session] = a.at - t0
			}
		}
	}
	var addMs []float64
	for _, d := range firstAt {
		addMs = append(addMs, float64(d)/float64(time.Millisecond))
	}
	sort.Float64s(cli)
	as := bench.Summarize(addMs)
	rows = append(rows, Row{Figure: fmt.Sprintf("fleet, %s: `pollworker sessions add` → first poll (%d added one by one)", at, len(addIDs)),
		Target: "p99 ≤ 250 ms", Unit: "ms", Ours: as, Met: met(len(addMs) == len(addIDs) && as.P99 <= 250),
		Note: fmt.Sprintf("per-add distribution (median, p99); measured from the start of the CLI process, whose run takes %.0f ms (median; p99 %.0f ms); never polled within 5 s: %d",
			percentile(cli, 50), percentile(cli, 99), len(addIDs)-len(addMs))})

	// SIGTERM of w-0: for each of its sessions, its last poll by w-0 →
	// the first poll by another worker.
	tk, load := x.target.now(), x.loadMeter(procs[1:])
	if err := procs[0].stop(20 * time.Second); err != nil {
		rows = append(rows, Row{Figure: "fleet: SIGTERM of w-0", Note: err.Error()})
	}
	procs[0] = nil
	drained := x.target.now() - tk
	if err := sleepCtx(ctx, 5*x.sz.interval); err != nil {
		return rows, err
	}
	handoffLoad := load()
	last, next := map[string]time.Duration{}, map[string]time.Duration{}
	for _, a := range x.target.since(tk - 2*x.sz.interval) {
		if a.worker == "w-0" {
			last[a.session] = a.at
			delete(next, a.session)
			continue
		}
		if l, ok := last[a.session]; ok && a.at > l {
			if _, seen := next[a.session]; !seen {
				next[a.session] = a.at
			}
		}
	}
	var gaps, lateMs []float64
	for s, l := range last {
		if nx, ok := next[s]; ok {
			g := float64(nx-l) / float64(time.Millisecond)
			gaps = append(gaps, g)
			lateMs = append(lateMs, g-float64(x.sz.interval)/float64(time.Millisecond))
		}
	}
	missing := len(last) - len(gaps)
	gs, ls := bench.Summarize(gaps), bench.Summarize(lateMs)
	rows = append(rows,
		Row{Figure: fmt.Sprintf("fleet, %s: SIGTERM of one worker, last poll by the old owner → first by the new (gap)", at),
			Target: "reported", Unit: "ms", Ours: gs,
			Note: fmt.Sprintf("per-session distribution (median, p99; max %.0f ms); %d sessions of the stopped worker, %d not polled by another within %v after its exit; SIGTERM → exit %v; from SIGTERM to 5 s after the exit, survivors' %s",
				gs.Max, len(last), missing, 5*x.sz.interval, drained.Round(time.Millisecond), handoffLoad)},
		Row{Figure: fmt.Sprintf("fleet, %s: SIGTERM handoff gap − interval (late against the schedule)", at),
			Target: "p99 ≤ 250 ms", Unit: "ms", Ours: ls, Met: met(missing == 0 && !math.IsNaN(ls.P99) && ls.P99 <= 250),
			Note: "the schedule passes to the successor, so a punctual handoff has gap = interval; the target applies to the excess"})
	return rows, nil
}

// startFleet applies n sessions, starts w workers on them and waits until
// every session was polled and its lease is held. It returns the workers
// (to stop with stopProcs, also on an error) and the target's time before
// they started.
func (x *e2e) startFleet(ctx context.Context, w, n int, env []string) ([]*e2eProc, time.Duration, error) {
	procs := make([]*e2eProc, w)
	if err := x.apply(ctx, e2eIDs("e2e", n)); err != nil {
		return procs, 0, err
	}
	x.target.clear()
	mark := x.target.now()
	for i := range procs {
		p, err := x.startWorker("w-"+strconv.Itoa(i), "all", env...)
		if err != nil {
			return procs, mark, err
		}
		procs[i] = p
	}
	if err := x.waitPolled(ctx, procs[0], mark, "", n); err != nil {
		return procs, mark, err
	}
	held := func() float64 {
		var h float64
		for _, p := range procs {
			m, err := scrapeMetrics(ctx, p.httpAddr)
			if err != nil {
				return -1
			}
			h += sumMetric(m, "pollworker_leases_held")
		}
		return h
	}
	err := waitFor(ctx, x.sz.startTimeout, fmt.Sprintf("%d leases held", n), func() bool { return held() == float64(n) })
	return procs, mark, err
}

// measureFleet lets a started fleet warm up, then measures the target's
// polls over window: the stats since mark and the processes' CPU meter.
func (x *e2e) measureFleet(ctx context.Context, procs []*e2eProc, mark, window time.Duration) (arrivalStats, func() string, error) {
	if err := sleepCtx(ctx, x.sz.warmOurs); err != nil {
		return arrivalStats{}, nil, err
	}
	from, load := x.target.now(), x.loadMeter(procs)
	if err := sleepCtx(ctx, window); err != nil {
		return arrivalStats{}, nil, err
	}
	return analyze(x.target.since(mark), from-x.sz.interval, from, x.target.now(), x.sz.interval), load, nil
}

// stopProcs stops the processes of procs that are not nil.
func stopProcs(procs []*e2eProc) {
	for _, p := range procs {
		if p != nil {
			_ = p.stop(15 * time.Second)
		}
	}
}

// fleetVsOne runs w workers on the n sessions that single, one worker, was
// just measured on: more than one worker sustains, so that both are bound
// by this machine's CPU. It reports the polls/s the fleet achieves against
// the one worker's: what running w processes costs. Then again with each
// worker's GOMAXPROCS at its share of the cores (what a CPU limit of that
// share sets in a container, Go reading the cgroup's limit): w Go runtimes
// of GOMAXPROCS = all cores each keep more threads spinning for work than
// there are cores.
func (x *e2e) fleetVsOne(ctx context.Context, w, n int, single e2eRun) ([]Row, error) {
	procs := max(1, runtime.NumCPU()/w)
	var rows []Row
	for _, env := range [][]string{nil, {"GOMAXPROCS=" + strconv.Itoa(procs)}} {
		st, load, err := x.fleetRate(ctx, w, n, env)
		if err != nil {
			return rows, err
		}
		ratio := 100 * st.perSec / single.st.perSec
		row := Row{Figure: fmt.Sprintf("fleet of %d vs 1 worker on this machine, the same %d sessions: polls/s achieved", w, n),
			Target: "≥ 90 %", Unit: "%", Ours: one(ratio), Met: met(ratio >= 90),
			Note: fmt.Sprintf("%.0f polls/s due; the fleet %.0f polls/s, one worker %.0f polls/s (the overload run just before, same window); the fleet's %s",
				float64(n)/x.sz.interval.Seconds(), st.perSec, single.st.perSec, load)}
		if env != nil {
			row.Figure = fmt.Sprintf("fleet of %d vs 1 worker, each worker GOMAXPROCS=%d (its share of the %d cores), the same %d sessions: polls/s achieved", w, procs, runtime.NumCPU(), n)
			row.Target, row.Met = "reported", ""
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// fleetRate starts w workers (with env added to theirs) on n sessions,
// measures them over the window and stops them: the target's stats and
// the processes' CPU.
func (x *e2e) fleetRate(ctx context.Context, w, n int, env []string) (arrivalStats, string, error) {
	procs, mark, err := x.startFleet(ctx, w, n, env)
	defer stopProcs(procs)
	if err != nil {
		return arrivalStats{}, "", err
	}
	st, load, err := x.measureFleet(ctx, procs, mark, x.sz.window)
	if err != nil {
		return arrivalStats{}, "", err
	}
	return st, load(), nil
}

// loadMeter starts measuring CPU: the returned func says, since the call,
// the % of one core used by each of procs, redis-server, pollbench and the
// whole machine (2 cores = 200 %).
func (x *e2e) loadMeter(procs []*e2eProc) func() string {
	t0, busy0, self0 := time.Now(), machineBusy(), must(procCPU(os.Getpid()))
	rs0, _ := redisstats.Read(context.Background(), x.e.admin)
	cpu0 := make([]time.Duration, len(procs))
	for i, p := range procs {
		cpu0[i] = must(procCPU(p.cmd.Process.Pid))
	}
	return func() string {
		win := time.Since(t0).Seconds()
		pct := func(d time.Duration) float64 { return 100 * d.Seconds() / win }
		out := "CPU, % of one core: workers"
		for i, p := range procs {
			out += fmt.Sprintf(" %.0f", pct(must(procCPU(p.cmd.Process.Pid))-cpu0[i]))
		}
		rs1, _ := redisstats.Read(context.Background(), x.e.admin)
		return out + fmt.Sprintf(", redis-server %.0f, pollbench (target + proxy) %.0f, whole machine %.0f of 200",
			100*rs1.Delta(rs0).CPUSeconds/win, pct(must(procCPU(os.Getpid()))-self0), pct(machineBusy()-busy0))
	}
}

// must drops the error of a /proc read (0 for a process gone).
func must(d time.Duration, _ error) time.Duration { return d }

// e2eTiny runs the limit loop in-process for the smoke test: no binary,
// no child process.
func e2eTiny(ctx context.Context, es e2eSizes) ([]Row, error) {
	t, err := startTarget()
	if err != nil {
		return nil, err
	}
	defer t.close()
	n := es.perWorker[0]
	lctx, cancel := context.WithTimeout(ctx, es.warm+es.window)
	defer cancel()
	from := t.now() + es.warm
	if err := runLimit(lctx, limitConfig{IDs: e2eIDs("e2e", n), URLPrefix: t.urlPrefix(), Interval: es.interval, Worker: "limit"}); err != nil {
		return nil, err
	}
	st := analyze(t.since(0), from-es.interval, from, from+es.window-es.interval/2, es.interval)
	return []Row{{Figure: fmt.Sprintf("limit loop in-process, %d sessions every %v (tiny mode: the binary is not run)", n, es.interval),
		Target: "reported", Ours: one(st.perSec / (float64(n) / es.interval.Seconds())),
		Note: fmt.Sprintf("polls/s ÷ sessions/s; busiest/mean 10 ms slot %.2f", st.busiestSlot)}}, nil
}
