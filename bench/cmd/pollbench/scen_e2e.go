package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pollworker/pollworker/internal/redisstats"
	"github.com/pollworker/pollworker/internal/redistest"
)

// Scenario e2e (issue 13): the real pollworker binary against a local HTTP
// target, next to the physical limit of the same job (scen_e2e_limit.go)
// alone and recording each result with a pipelined XADD, in the same run.
// Every process polls the same sessions (1 s interval) at the same target;
// each is measured alone over the same window after the same warm-up:
//
//   - CPU per poll: utime+stime of the process (/proc/PID/stat) over the
//     window / polls that reached the target in it;
//   - RSS: VmRSS at the end of the window (VmHWM in the note);
//   - connections: the most open at the target (http.Server ConnState)
//     during the window;
//   - Redis round trips per poll: counted by a TCP proxy in front of
//     redis-server that every worker and limit connection goes through
//     (rtProxy); Redis CPU per poll: INFO cpu delta over the window;
//   - busiest 10 ms slot of arrivals / mean slot; lateness p99 against each
//     session's grid (its first arrival + k × interval);
//   - kept up: polls/s ≥ 0.98 × sessions/s.
//
// Then the overload (1.5× and 2× the sessions one worker sustained here),
// the 2× sessions over a fleet of 5 on this machine (polls/s against the
// one worker's), a --record changes run, and a fleet of 3 workers: sessions added with
// `pollworker sessions add` (→ first poll) and a SIGTERM of one worker
// (→ handoff gap at the target).

// e2eSizes are the sizes of one e2e run.
type e2eSizes struct {
	perWorker     []int // sessions on one worker, one table column each
	runs          int   // interleaved runs of ours, the limit and the limit with XADD per size
	interval      time.Duration
	warm, window  time.Duration // warm: the limit's warm-up
	warmOurs      time.Duration // the worker's: its spread step moves polls onto their phase over ~10 intervals
	refine        bool          // try the midpoint between the last size kept up and the first not
	overload      bool
	changesAt     int // sessions of the --record changes run; 0 = none
	fleetWorkers  int
	fleetSessions int // per worker
	fleetVsOne    int // workers of the fleet run on the 2× overload's sessions; 0 = none
	fleetVsOneAt  int // -e2e-fleet: only one worker and then the fleet on this many sessions
	adds          int
	startTimeout  time.Duration
	tinyInProcess bool // tiny mode: only the limit loop, in-process
}

func e2eSizesFor(mode string) e2eSizes {
	switch mode {
	case "tiny":
		return e2eSizes{perWorker: []int{50}, interval: 200 * time.Millisecond, warm: 300 * time.Millisecond,
			window: time.Second, warmOurs: 300 * time.Millisecond, tinyInProcess: true}
	case "quick":
		return e2eSizes{perWorker: []int{1000, 5000}, runs: 1, interval: time.Second, warm: 2 * time.Second, window: 5 * time.Second,
			warmOurs: 12 * time.Second,
			overload: true, fleetVsOne: 5, changesAt: 1000, fleetWorkers: 3, fleetSessions: 2000, adds: 20, startTimeout: 60 * time.Second}
	default:
		return e2eSizes{perWorker: []int{1000, 5000, 10000, 20000}, runs: 3, interval: time.Second, warm: 3 * time.Second,
			warmOurs: 11 * time.Second, window: 6 * time.Second, refine: true, overload: true, fleetVsOne: 5, changesAt: 5000,
			fleetWorkers: 3, fleetSessions: 10000, adds: 50, startTimeout: 60 * time.Second}
	}
}

// e2e holds the instruments of one scenario run.
type e2e struct {
	e      *env
	sz     e2eSizes
	dir    string
	bin    string // the pollworker binary
	self   string // this program, re-executed as the limit loop
	target *e2eTarget
	proxy  *rtProxy
}

// e2eRun is what one process did over the window.
type e2eRun struct {
	n           int
	st          arrivalStats
	cpuPerPoll  float64 // µs
	cpuPct      float64 // % of one core
	rss, hwm    int64
	conns       int64
	rtPerPoll   float64
	redisPerPol float64 // µs of Redis CPU per poll
	xaddPerPoll float64
	redisPct    float64
	benchPct    float64 // pollbench itself: the target and the proxy
	machinePct  float64 // every CPU of the machine busy, % of one core
	metrics     map[string]float64
	start       time.Duration // process start → every session polled
}

func (r e2eRun) keptUp() bool { return r.st.perSec >= 0.98*float64(r.n) }

func runE2E(ctx context.Context, e *env, sz sizes) ([]Row, error) {
	es := e2eSizesFor(sz.mode)
	if len(sz.e2eSizes) > 0 {
		es.perWorker, es.refine, es.overload, es.changesAt, es.fleetWorkers, es.fleetVsOne = sz.e2eSizes, false, false, 0, 0, 0
	}
	if sz.e2eFleet > 0 {
		es.perWorker, es.refine, es.overload, es.changesAt, es.fleetWorkers, es.fleetVsOneAt = nil, false, false, 0, 0, sz.e2eFleet
	}
	if es.tinyInProcess {
		return e2eTiny(ctx, es)
	}
	x := &e2e{e: e, sz: es}
	var err error
	if x.dir, err = os.MkdirTemp("", "pollbench-e2e-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(x.dir)
	if x.bin, err = buildWorker(ctx, x.dir); err != nil {
		return nil, err
	}
	if x.self, err = os.Executable(); err != nil {
		return nil, err
	}
	if x.target, err = startTarget(); err != nil {
		return nil, err
	}
	defer x.target.close()
	if x.proxy, err = startRTProxy(e.redis.Addr()); err != nil {
		return nil, err
	}
	defer x.proxy.close()
	return x.run(ctx)
}

// buildWorker builds the pollworker binary into dir and returns its path.
func buildWorker(ctx context.Context, dir string) (string, error) {
	root, err := mainModuleDir(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "pollworker")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/pollworker")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/pollworker: %w: %s", err, out)
	}
	return bin, nil
}

// mainModuleDir is the directory of the pollworker module this benchmark
// module builds against (the parent directory, through go.mod's replace),
// as the go command resolves it.
func mainModuleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/pollworker/pollworker").Output()
	if err != nil {
		return "", fmt.Errorf("locating the pollworker module: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func e2eIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%06d", prefix, i)
	}
	return ids
}

// apply resets Redis and stores the sessions with `pollworker sessions
// apply -f` (directly, not through the proxy).
func (x *e2e) apply(ctx context.Context, ids []string) error {
	if err := x.e.reset(ctx); err != nil {
		return err
	}
	type entry struct {
		ID       string `json:"id"`
		URL      string `json:"url"`
		Interval string `json:"interval"`
	}
	file := struct {
		Sessions []entry `json:"sessions"`
	}{}
	for _, id := range ids {
		file.Sessions = append(file.Sessions, entry{ID: id, URL: x.target.urlPrefix() + id, Interval: x.sz.interval.String()})
	}
	b, err := json.Marshal(file)
	if err != nil {
		return err
	}
	path := filepath.Join(x.dir, "sessions.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, x.bin, "sessions", "apply", "-f", path,
		"--redis-url", "redis://"+x.e.redis.Addr()+"/0", "--timeout", "60s").CombinedOutput()
	if err != nil {
		return fmt.Errorf("sessions apply: %w: %s", err, out)
	}
	return nil
}

// e2eProc is a child process: a worker or the limit loop.
type e2eProc struct {
	cmd      *exec.Cmd
	httpAddr string // a worker's --http-addr
	log      string
	done     chan struct{}
	err      error
}

// startProc starts bin (the worker, or pollbench itself for the limit
// loop) with args and env added to this process's environment; its output
// goes to a log named after name.
func (x *e2e) startProc(name, bin string, args, env []string) (*e2eProc, error) {
	p := &e2eProc{log: filepath.Join(x.dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() { p.err = p.cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

// startWorker starts `pollworker run` with id and record mode, env added
// to its environment.
func (x *e2e) startWorker(id, record string, env ...string) (*e2eProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := x.startProc(id, x.bin, []string{"run", "--id", id, "--redis-url", "redis://" + x.proxy.addr() + "/0",
		"--http-addr", addr, "--record", record, "--log-level", "warn", "--log-format", "console",
		// reset declares the keyspace fresh; no quarantine either way.
		"--loss-quarantine", "off"}, env)
	if err != nil {
		return nil, err
	}
	p.httpAddr = addr
	return p, nil
}

// startLimit starts the limit loop as a child process, polling as "limit".
func (x *e2e) startLimit(ids []string, record bool, slack time.Duration) (*e2eProc, error) {
	return x.startLimitAs("limit", ids, record, slack)
}

// startLimitAs starts the limit loop as a child process that polls with
// the worker header name (its log and config file are named after it).
func (x *e2e) startLimitAs(name string, ids []string, record bool, slack time.Duration) (*e2eProc, error) {
	cfg := limitConfig{IDs: ids, URLPrefix: x.target.urlPrefix(), Interval: x.sz.interval, Worker: name, Slack: slack}
	if record {
		cfg.Redis, cfg.Stream, cfg.MaxLen, cfg.Flush = x.proxy.addr(), x.e.keys.Results(), 100_000, 100*time.Millisecond
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(x.dir, name+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	return x.startProc(name, x.self, nil, []string{limitEnv + "=" + path})
}

// stop sends SIGTERM and waits up to timeout, then kills.
func (p *e2eProc) stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s: killed after %v without exiting on SIGTERM", filepath.Base(p.log), timeout)
	}
}

func freePort() (int, error) { return redistest.PickPort() }

// waitPolled waits until worker ("" = anyone) polled n sessions since mark.
func (x *e2e) waitPolled(ctx context.Context, p *e2eProc, mark time.Duration, worker string, n int) error {
	return waitFor(ctx, x.sz.startTimeout, fmt.Sprintf("%d sessions polled by %q", n, worker), func() bool {
		select {
		case <-p.done:
			return true
		default:
		}
		return x.target.polled(mark, worker) >= n
	})
}

// measure warms up, then measures process p (pid) over the window.
func (x *e2e) measure(ctx context.Context, p *e2eProc, n int, mark, warm time.Duration) (e2eRun, error) {
	r := e2eRun{n: n}
	pid := p.cmd.Process.Pid
	if err := sleepCtx(ctx, warm); err != nil {
		return r, err
	}
	x.target.resetPeak()
	cpu0, err := procCPU(pid)
	if err != nil {
		return r, err
	}
	self0, _ := procCPU(os.Getpid())
	busy0 := machineBusy()
	rs0, err := redisstats.Read(ctx, x.e.admin)
	if err != nil {
		return r, err
	}
	rt0, from := x.proxy.roundTrips(), x.target.now()
	if err := sleepCtx(ctx, x.sz.window); err != nil {
		return r, err
	}
	to, rt1 := x.target.now(), x.proxy.roundTrips()
	rs1, err := redisstats.Read(ctx, x.e.admin)
	if err != nil {
		return r, err
	}
	self1, _ := procCPU(os.Getpid())
	busy1 := machineBusy()
	cpu1, err := procCPU(pid)
	if err != nil {
		return r, err
	}
	r.conns = x.target.peak.Load()
	if r.rss, r.hwm, err = procMem(pid); err != nil {
		return r, err
	}
	if p.httpAddr != "" {
		if r.metrics, err = scrapeMetrics(ctx, p.httpAddr); err != nil {
			return r, err
		}
	}
	r.st = analyze(x.target.since(mark), from-x.sz.interval, from, to, x.sz.interval)
	polls := float64(max(r.st.polls, 1))
	win := (to - from).Seconds()
	d := rs1.Delta(rs0)
	r.cpuPerPoll = float64((cpu1 - cpu0).Microseconds()) / polls
	r.cpuPct = 100 * (cpu1 - cpu0).Seconds() / win
	r.benchPct = 100 * (self1 - self0).Seconds() / win
	r.machinePct = 100 * (busy1 - busy0).Seconds() / win
	r.rtPerPoll = float64(rt1-rt0) / polls
	r.redisPerPol = d.CPUSeconds * 1e6 / polls
	r.redisPct = 100 * d.CPUSeconds / win
	r.xaddPerPoll = float64(d.Commands["xadd"].Calls) / polls
	return r, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ours runs one worker on n sessions and measures it.
func (x *e2e) ours(ctx context.Context, n int, record string) (e2eRun, error) {
	if err := x.apply(ctx, e2eIDs("e2e", n)); err != nil {
		return e2eRun{}, err
	}
	return x.runOne(ctx, n, "w-0", x.sz.warmOurs, func() (*e2eProc, error) { return x.startWorker("w-0", record) })
}

// limit runs the limit loop on n sessions, recording or not.
func (x *e2e) limit(ctx context.Context, n int, record bool, slack time.Duration) (e2eRun, error) {
	if err := x.e.reset(ctx); err != nil {
		return e2eRun{}, err
	}
	return x.runOne(ctx, n, "limit", x.sz.warm, func() (*e2eProc, error) { return x.startLimit(e2eIDs("e2e", n), record, slack) })
}

// runOne starts a process that polls as worker, waits until it polled all
// n sessions, measures it after warm and stops it.
func (x *e2e) runOne(ctx context.Context, n int, worker string, warm time.Duration, start func() (*e2eProc, error)) (e2eRun, error) {
	x.target.clear()
	mark := x.target.now()
	p, err := start()
	if err != nil {
		return e2eRun{}, err
	}
	defer p.stop(15 * time.Second)
	if err := x.waitPolled(ctx, p, mark, worker, n); err != nil {
		return e2eRun{}, fmt.Errorf("%w (log %s)", err, p.log)
	}
	started := x.target.now() - mark
	r, err := x.measure(ctx, p, n, mark, warm)
	r.start = started
	if err != nil {
		return r, err
	}
	if err := p.stop(15 * time.Second); err != nil {
		return r, fmt.Errorf("%s at %d sessions: %w", worker, n, err)
	}
	return r, nil
}
