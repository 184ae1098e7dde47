package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pollworker/pollworker/bench"
)

// Scenario overload (issue 22 item 3): one worker (the real binary) past
// its capacity, bound by the per-host limit (--max-per-host, a target that
// holds each request) and by the CPU (no host bound, a target answering at
// once), at 1.5× and 3× the rate it achieves. Measured at the target and
// on the worker's /metrics:
//
//   - each session's longest gap over the window (a session not polled in
//     it counts the whole window), against the fair bound interval ×
//     due/achieved × 1.25 + 200 ms, due and achieved counted at the target;
//   - time from the worker's first poll to pollworker_behind 1, and the
//     reason it gives (pollworker_behind_reason);
//   - recovery: peers join until the fleet has room (each worker at about
//     0.75× its capacity); the time from the last peer's first heartbeat
//     until every session is back at its interval (no later gap above
//     interval × 1.25 + 200 ms), against two intervals + 1 s.
//
// In the CPU-bound cases each worker is held to overloadSizes.cageCPUs
// by a cgroup CPU quota of its own (cpuCage; root on Linux), so that it
// has a capacity of its own and each peer that joins adds room even on a
// machine of two cores. Without cgroups the peers share the machine's
// CPUs with the first worker and add no room unless it has idle cores;
// the rows say which.

// overloadCase is one run of the scenario.
type overloadCase struct {
	bound      string        // "host-limit" or "cpu"
	factor     float64       // due / the rate achieved alone
	interval   time.Duration // every session's
	sessions   int
	maxPerHost int           // --max-per-host; 0 = no bound
	hold       time.Duration // the target holds each request this long
	cage       float64       // CPUs each worker is held to (cpuCage); 0 = none
	// capacity is the polls/s one worker can do in this case (the CPU
	// probe's); peers join until each worker is at 0.75× of it. 0: what
	// the first worker achieved in the window.
	capacity float64
}

func (c overloadCase) name() string { return fmt.Sprintf("%s %.1fx", c.bound, c.factor) }

// overloadSizes are the knobs of one mode.
type overloadSizes struct {
	maxPerHost    int
	hold          time.Duration
	hostInterval  time.Duration
	cpuInterval   time.Duration
	probeSessions int     // the CPU probe: sessions at cpuInterval, far above capacity
	cageCPUs      float64 // CPUs each CPU-bound worker is held to, when cgroups allow
	warm, window  time.Duration
	watch         time.Duration // after the join
}

func overloadSizesFor(mode string) overloadSizes {
	s := overloadSizes{maxPerHost: 16, hold: 20 * time.Millisecond, hostInterval: 500 * time.Millisecond,
		cpuInterval: 200 * time.Millisecond, probeSessions: 4000, cageCPUs: 0.3, warm: 6 * time.Second, window: 15 * time.Second,
		watch: 20 * time.Second}
	if mode == "quick" {
		s.window, s.watch = 8*time.Second, 15*time.Second
	}
	return s
}

// overloadRun is what one case measured.
type overloadRun struct {
	c              overloadCase
	due, achieved  float64   // polls/s: sessions/interval, and at the target over the window
	maxGaps        []float64 // ms, each session's longest gap in the window
	bound          float64   // ms: interval × due/achieved × 1.25 + 200 ms
	over, never    int       // sessions over the bound, sessions not polled in the window
	behindAfter    float64   // ms from the first poll to pollworker_behind 1; -1 never
	reason         string    // pollworker_behind_reason's labels when it was reported
	settled        string    // the same at the end of the window
	recovery       float64   // ms from the last peer's first heartbeat until every session is back at its interval; -1 not within the watch
	recoveryStart  float64   // the same from the peers' start
	caughtUp       float64   // ms from the last peer's first heartbeat to pollworker_behind 0 on the first worker; -1 never
	peers          int
	notRecovered   int // sessions still not at their interval at the end of the watch
	workerAchieved float64
	limit          float64 // pollworker_polls_limit at the end of the window
}

func runOverload(ctx context.Context, e *env, sz sizes) ([]Row, error) {
	if sz.mode == "tiny" {
		return []Row{{Figure: "overload: not run in tiny mode (the built binary for minutes)", Note: "go run ./cmd/pollbench -only overload"}}, nil
	}
	osz := overloadSizesFor(sz.mode)
	x := &e2e{e: e, sz: e2eSizes{startTimeout: 60 * time.Second}}
	var err error
	if x.dir, err = os.MkdirTemp("", "pollbench-overload-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(x.dir)
	if x.bin, err = buildWorker(ctx, x.dir); err != nil {
		return nil, err
	}
	slow, err := startHoldingTarget(osz.hold)
	if err != nil {
		return nil, err
	}
	defer slow.close()
	fast, err := startTarget()
	if err != nil {
		return nil, err
	}
	defer fast.close()

	hostCap := float64(osz.maxPerHost) / osz.hold.Seconds() // polls/s the host bound allows, at most
	var cases []overloadCase
	for _, f := range []float64{1.5, 3} {
		n := int(math.Round(f * hostCap * osz.hostInterval.Seconds()))
		cases = append(cases, overloadCase{bound: "host-limit", factor: f, interval: osz.hostInterval, sessions: n,
			maxPerHost: osz.maxPerHost, hold: osz.hold})
	}
	// The CPU bound: what one worker achieves with far more due than it can
	// run, measured first.
	x.target = fast
	cage, caged := osz.cageCPUs, "each worker held to %.2g CPUs by a cgroup CPU quota of its own, so that a peer adds room"
	if c, err := newCPUCage(fmt.Sprintf("pollbench-%d-try", os.Getpid()), cage); err != nil {
		cage, caged = 0, "no CPU quota ("+err.Error()+"): the peers share the machine's CPUs and add room only where it has idle cores"
	} else {
		_ = c.close()
		caged = fmt.Sprintf(caged, cage)
	}
	probe, err := x.overloadOnce(ctx, overloadCase{bound: "cpu-probe", factor: 0, interval: osz.cpuInterval,
		sessions: osz.probeSessions, cage: cage}, osz, false)
	if err != nil {
		return nil, err
	}
	for _, f := range []float64{1.5, 3} {
		n := int(math.Round(f * probe.achieved * osz.cpuInterval.Seconds()))
		cases = append(cases, overloadCase{bound: "cpu", factor: f, interval: osz.cpuInterval, sessions: n, cage: cage,
			capacity: probe.achieved})
	}
	var rows []Row
	rows = append(rows, Row{Figure: "overload: polls/s one worker achieves CPU-bound (probe)", Unit: "polls/s",
		Ours: bench.Summarize([]float64{probe.achieved}),
		Note: fmt.Sprintf("%d sessions at %v (%.0f polls/s due), no host bound; %s; the machine is shared, so this varies from run to run",
			osz.probeSessions, osz.cpuInterval, probe.due, caged)})
	for _, c := range cases {
		x.target = fast
		if c.hold > 0 {
			x.target = slow
		}
		r, err := x.overloadOnce(ctx, c, osz, true)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", c.name(), err)
		}
		rows = append(rows, r.rows()...)
	}
	return rows, nil
}

// rows turns one case into report rows.
func (r overloadRun) rows() []Row {
	name := "overload " + r.c.name()
	gaps := bench.Summarize(r.maxGaps)
	recoverTarget := float64((2*r.c.interval + time.Second).Milliseconds())
	ms := func(v float64) bench.Summary { return bench.Summarize([]float64{v}) }
	return []Row{
		{Figure: fmt.Sprintf("%s: per-session max gap (%d sessions at %v, due %.0f, achieved %.0f polls/s)", name, r.c.sessions,
			r.c.interval, r.due, r.achieved),
			Target: fmt.Sprintf("max ≤ interval × due/achieved × 1.25 + 200 ms = %.0f ms", r.bound), Unit: "ms", Ours: gaps,
			Met: met(gaps.Max <= r.bound),
			Note: fmt.Sprintf("%d sessions over the bound, %d not polled in the window; worker's own achieved rate %.0f/s; its poll limit at the end %.0f",
				r.over, r.never, r.workerAchieved, r.limit)},
		{Figure: name + ": first poll → pollworker_behind 1", Target: "≤ 5 s", Unit: "ms", Ours: ms(r.behindAfter),
			Met:  met(r.behindAfter >= 0 && r.behindAfter <= 5000),
			Note: "reason " + dashStr(r.reason) + "; at the end of the window " + dashStr(r.settled)},
		{Figure: fmt.Sprintf("%s: %d peer(s) join → every session back at its interval", name, r.peers),
			Target: fmt.Sprintf("≤ 2 × interval + 1 s = %.0f ms", recoverTarget), Unit: "ms", Ours: ms(r.recovery),
			Met: met(r.recovery >= 0 && r.recovery <= recoverTarget),
			Note: fmt.Sprintf("from the last peer's first heartbeat (from the peers' start: %.0f ms); %d sessions not back by the end of the watch; "+
				"first worker's pollworker_behind 0 after %.0f ms", r.recoveryStart, r.notRecovered, r.caughtUp)},
	}
}

func dashStr(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// overloadOnce runs one case: the sessions applied afresh, one worker,
// the window measured, then (join) peers started and recovery watched.
func (x *e2e) overloadOnce(ctx context.Context, c overloadCase, osz overloadSizes, join bool) (overloadRun, error) {
	r := overloadRun{c: c, due: float64(c.sessions) / c.interval.Seconds(), behindAfter: -1, recovery: -1, recoveryStart: -1, caughtUp: -1}
	ids := e2eIDs("o", c.sessions)
	x.sz.interval = c.interval
	if err := x.apply(ctx, ids); err != nil {
		return r, err
	}
	x.target.clear()
	var procs []*e2eProc
	var cages []*cpuCage
	defer func() {
		for _, p := range procs {
			_ = p.stop(15 * time.Second)
		}
		for _, cg := range cages {
			_ = cg.close()
		}
	}()
	start := func(id string) (*e2eProc, error) {
		p, err := x.startOverloadWorker(id, c)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		if c.cage > 0 {
			cg, err := newCPUCage(fmt.Sprintf("pollbench-%d-%s-%s", os.Getpid(), strings.ReplaceAll(c.name(), " ", "-"), id), c.cage)
			if err != nil {
				return p, err
			}
			cages = append(cages, cg)
			if err := cg.add(p.cmd.Process.Pid); err != nil {
				return p, err
			}
		}
		return p, nil
	}
	w1, err := start("w1")
	if err != nil {
		return r, err
	}
	watch := newBehindWatch(ctx, w1.httpAddr, x.target)
	defer watch.stop()
	if err := waitFor(ctx, x.sz.startTimeout, "the first poll", func() bool { return x.target.polled(0, "") > 0 }); err != nil {
		return r, err
	}
	first := x.target.since(0)[0].at
	if err := sleepCtx(ctx, osz.warm); err != nil {
		return r, err
	}
	from := x.target.now()
	before, _ := scrapeMetrics(ctx, w1.httpAddr)
	if err := sleepCtx(ctx, osz.window); err != nil {
		return r, err
	}
	to := x.target.now()
	after, _ := scrapeMetrics(ctx, w1.httpAddr)
	arr := x.target.since(from)
	r.maxGaps, r.never = maxGaps(arr, ids, from, to)
	polls := 0
	for _, a := range arr {
		if a.at < to {
			polls++
		}
	}
	r.achieved = float64(polls) / (to - from).Seconds()
	r.workerAchieved = sumMetric(after, "pollworker_polls_total") - sumMetric(before, "pollworker_polls_total")
	r.workerAchieved /= (to - from).Seconds()
	r.limit = sumMetric(after, "pollworker_polls_limit")
	if r.achieved > 0 {
		ratio := max(1, r.due/r.achieved)
		r.bound = float64(c.interval.Milliseconds())*ratio*1.25 + 200
	}
	for _, g := range r.maxGaps {
		if g > r.bound {
			r.over++
		}
	}
	if at, reason := watch.firstBehind(); at >= 0 {
		r.behindAfter, r.reason = float64((at - first).Milliseconds()), reason
	}
	r.settled = watch.reasonAt(to)
	if !join {
		return r, nil
	}
	// Peers until each worker is at about 0.75× its capacity: the probe's
	// rate, or what one achieved here. (A worker far past its capacity may
	// achieve less than the probe; peers enough for that rate would not fit
	// in a machine of two cores with the target.)
	capacity := c.capacity
	if capacity <= 0 {
		capacity = r.achieved
	}
	r.peers = max(1, int(math.Ceil(r.due/max(capacity, 1)/0.75))-1)
	joinMark := x.target.now()
	var last string
	for i := range r.peers {
		last = fmt.Sprintf("p%d", i+1)
		if _, err := start(last); err != nil {
			return r, err
		}
	}
	hb := firstHeartbeat(ctx, x.e, last, time.Now(), x.sz.startTimeout)
	room := x.target.now() // the heartbeat was not seen: from now
	if hb > 0 {
		room = joinMark + hb
	}
	if err := sleepCtx(ctx, osz.watch); err != nil {
		return r, err
	}
	end := x.target.now()
	back, notBack := recoveredAt(x.target.since(joinMark-osz.window), ids, c.interval, joinMark, end)
	r.notRecovered = notBack
	if notBack == 0 {
		r.recovery = float64(max(0, back-room).Milliseconds())
		r.recoveryStart = float64((back - joinMark).Milliseconds())
	}
	if at := watch.caughtUpAfter(room); at >= 0 {
		r.caughtUp = float64((at - room).Milliseconds())
	}
	return r, nil
}

// startOverloadWorker starts `pollworker run` for case c, directly on
// redis-server.
func (x *e2e) startOverloadWorker(id string, c overloadCase) (*e2eProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"run", "--id", id, "--redis-url", "redis://" + x.e.redis.Addr() + "/0",
		"--http-addr", addr, "--record", "none", "--log-level", "info", "--log-format", "console",
		"--loss-quarantine", "off", "--max-per-host", strconv.Itoa(c.maxPerHost)}
	p, err := x.startProc(id, x.bin, args, nil)
	if err != nil {
		return nil, err
	}
	p.httpAddr = addr
	return p, nil
}

// maxGaps returns each session's longest gap between arrivals in [from,
// to), counting from `from` to its first arrival and from its last to
// `to` (a session with none counts the whole window), in ms, and how many
// sessions had none.
func maxGaps(arr []arrival, ids []string, from, to time.Duration) (gaps []float64, never int) {
	last := make(map[string]time.Duration, len(ids))
	worst := make(map[string]time.Duration, len(ids))
	for _, a := range arr {
		if a.at >= to {
			break
		}
		prev, ok := last[a.session]
		if !ok {
			prev = from
		}
		worst[a.session] = max(worst[a.session], a.at-prev)
		last[a.session] = a.at
	}
	for _, id := range ids {
		l, ok := last[id]
		if !ok {
			never++
			l = from
		}
		gaps = append(gaps, float64(max(worst[id], to-l).Milliseconds()))
	}
	return gaps, never
}

// recoveredAt returns when every session was back at its interval: the
// latest arrival in [from, to) that closed a gap above interval × 1.25 +
// 200 ms (from if none; arr starts before from, so that the gaps open at
// from count), and how many sessions were not back by `to` (their last
// arrival is older than that bound).
func recoveredAt(arr []arrival, ids []string, interval, from, to time.Duration) (time.Duration, int) {
	bound := interval*5/4 + 200*time.Millisecond
	last := make(map[string]time.Duration, len(ids))
	back := from
	for _, a := range arr {
		if a.at >= to {
			break
		}
		if prev, ok := last[a.session]; ok && a.at >= from && a.at-prev > bound {
			back = max(back, a.at)
		}
		last[a.session] = a.at
	}
	notBack := 0
	for _, id := range ids {
		if l, ok := last[id]; !ok || to-l > bound {
			notBack++
		}
	}
	return back, notBack
}

// behindWatch scrapes a worker's /metrics every 100 ms and keeps when
// pollworker_behind changed, on the target's clock.
type behindWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	changes []behindChange
}

type behindChange struct {
	at     time.Duration
	behind bool
	reason string
}

func newBehindWatch(ctx context.Context, addr string, clock *e2eTarget) *behindWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &behindWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		was := false
		for ctx.Err() == nil {
			if m, err := scrapeMetrics(ctx, addr); err == nil {
				if b := sumMetric(m, "pollworker_behind") == 1; b != was {
					was = b
					w.mu.Lock()
					w.changes = append(w.changes, behindChange{at: clock.now(), behind: b, reason: behindLabels(m)})
					w.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

// behindLabels returns the labels of pollworker_behind_reason at 1.
func behindLabels(m map[string]float64) string {
	var out []string
	for k, v := range m {
		if lab, ok := strings.CutPrefix(k, "pollworker_behind_reason{"); ok && v == 1 {
			out = append(out, strings.TrimSuffix(lab, "}"))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

func (w *behindWatch) stop() { w.cancel(); <-w.done }

// firstBehind returns when the worker first reported behind and why (-1
// if it never did).
// reasonAt returns the behind reason's labels as last seen at or before
// at ("" when not behind then).
func (w *behindWatch) reasonAt(at time.Duration) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	reason := ""
	for _, c := range w.changes {
		if c.at > at {
			break
		}
		reason = ""
		if c.behind {
			reason = c.reason
		}
	}
	return reason
}

func (w *behindWatch) firstBehind() (time.Duration, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.changes {
		if c.behind {
			return c.at, c.reason
		}
	}
	return -1, ""
}

// caughtUpAfter returns when the worker last stopped being behind, if it
// is not behind now and that came after `after` (-1 otherwise).
func (w *behindWatch) caughtUpAfter(after time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.changes); n > 0 && !w.changes[n-1].behind {
		return max(after, w.changes[n-1].at)
	}
	return -1
}
