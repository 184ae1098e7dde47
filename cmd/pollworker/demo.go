package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/urfave/cli/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/pollworker/pollworker/hrw"
	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// Timings of the demo's workers: short, so that things happen while one
// watches.
const (
	demoLeaseTTL          = 1500 * time.Millisecond
	demoRenewInterval     = 500 * time.Millisecond
	demoHeartbeatInterval = 300 * time.Millisecond
	demoDiscoveryInterval = 500 * time.Millisecond
	demoDrainTimeout      = 2 * time.Second
	demoTargets           = 3
	demoStopped           = "worker-2" // the worker the script stops
)

// demoOptions are the demo command's flags.
type demoOptions struct {
	Duration time.Duration
	Workers  int
	Sessions int
	Plain    bool
	Verbose  bool
}

func (o demoOptions) validate() error {
	switch {
	case o.Duration < time.Second || o.Duration > 10*time.Minute:
		return fmt.Errorf("--duration (%v) must be between 1s and 10m", o.Duration)
	case o.Workers < 2 || o.Workers > 8:
		return fmt.Errorf("--workers (%d) must be between 2 and 8", o.Workers)
	case o.Sessions < 1 || o.Sessions > 100:
		return fmt.Errorf("--sessions (%d) must be between 1 and 100", o.Sessions)
	}
	return nil
}

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "watch in-process workers share sessions, hand them off and take in a newcomer (no Redis needed)",
		Description: "Starts an embedded Redis (miniredis), 3 HTTP targets on 127.0.0.1 and --workers workers\n" +
			"polling --sessions sessions (intervals 200-500ms) with short timings (lease TTL 1.5s,\n" +
			"renewal 500ms, heartbeat 300ms, discovery 500ms). After a third of --duration it stops\n" +
			"worker-2 gracefully and shows its sessions moving; a little later a newcomer joins and\n" +
			"takes its share. At the end it checks, from the recorded polls and their fencing\n" +
			"tokens, that no session was ever polled by two workers at once (exit 1 otherwise).\n" +
			"Crashes are not simulated: a worker in this process can only stop gracefully.\n\n" +
			"It prints the address of its embedded Redis and a command that runs the leader-election\n" +
			"example against it from a second terminal (go run ./examples/election --redis ADDR);\n" +
			"give it time with --duration 2m. Ctrl-C ends the demo early, with its summary.",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "duration", Value: 12 * time.Second, Usage: "how long the demo runs"},
			&cli.IntFlag{Name: "workers", Value: 3, Usage: "workers at start (2-8); one more joins later"},
			&cli.IntFlag{Name: "sessions", Value: 30, Usage: "number of sessions (1-100)"},
			&cli.BoolFlag{Name: "plain", Usage: "print periodic lines even on a terminal"},
			&cli.BoolFlag{Name: "verbose", Usage: "log the workers' events to stderr"},
		},
		Action: action(func(ctx context.Context, cmd *cli.Command) error {
			o := demoOptions{
				Duration: cmd.Duration("duration"),
				Workers:  cmd.Int("workers"),
				Sessions: cmd.Int("sessions"),
				Plain:    cmd.Bool("plain"),
				Verbose:  cmd.Bool("verbose"),
			}
			if err := o.validate(); err != nil {
				return usageError(fmt.Errorf("demo: %w", err))
			}
			return runDemo(ctx, o, cmd.Root().Writer, cmd.Root().ErrWriter)
		}),
	}
}

// demo is one run of the demo.
type demo struct {
	opts     demoOptions
	log      *zap.Logger
	mr       *miniredis.Miniredis
	keys     keyspace.Space
	sessions []string // ids, sorted
	targets  []*demoTarget
	rec      *demoRecorder

	mu      sync.Mutex
	workers []*demoWorker // guarded by mu; in start order
}

// demoWorker is one in-process worker.
type demoWorker struct {
	name     string
	client   *redis.Client
	hp       *httppoll.Poller
	coord    *poller.Coordinator
	cancel   context.CancelFunc
	done     chan struct{} // closed when Run returned
	err      error         // Run's error, set before done is closed
	stopping atomic.Bool
	joinedAt time.Duration
	stopAt   atomic.Int64 // time.Duration since start; 0 while running
}

// runDemo runs the whole demo and prints to out; workers log to logw with
// --verbose.
func runDemo(ctx context.Context, o demoOptions, out, logw io.Writer) error {
	start := time.Now()
	d := &demo{opts: o, log: zap.NewNop(), rec: newDemoRecorder(start)}
	if o.Verbose {
		d.log = newLogger(logw, zapcore.InfoLevel, "console")
	}

	d.mr = miniredis.NewMiniRedis()
	if err := d.mr.StartAddr("127.0.0.1:0"); err != nil {
		return fmt.Errorf("demo: start embedded redis: %w", err)
	}
	defer d.mr.Close()
	d.mr.ClockTTL(true) // TTLs run on the wall clock, as in Redis

	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, t := range d.targets {
			t.close(ctx)
		}
	}()
	for range demoTargets {
		t, err := startTarget()
		if err != nil {
			return fmt.Errorf("demo: start target: %w", err)
		}
		d.targets = append(d.targets, t)
	}
	admin := redis.NewClient(&redis.Options{Addr: d.mr.Addr()})
	defer func() { _ = admin.Close() }()
	if err := d.addSessions(ctx, admin); err != nil {
		return err
	}

	view := newDemoView(d, out, start, !o.Plain && isTerminal(out))
	viewDone := make(chan struct{})
	stopView := make(chan struct{})
	go func() { defer close(viewDone); view.run(stopView) }()

	scriptErr := d.script(ctx, start)
	d.stopAll()
	close(stopView)
	<-viewDone

	n, err := admin.XLen(context.Background(), d.keys.Results()).Result()
	if err != nil {
		n = -1
	}
	return errors.Join(scriptErr, d.summary(out, time.Since(start), n))
}

// addSessions registers the sessions, spread over the targets.
func (d *demo) addSessions(ctx context.Context, client redis.UniversalClient) error {
	store, err := session.NewStore(client, d.keys)
	if err != nil {
		return err
	}
	for i := range d.opts.Sessions {
		id := fmt.Sprintf("s%02d", i+1)
		s := session.Session{
			ID:       id,
			URL:      d.targets[i%len(d.targets)].url + "/poll/" + id,
			Interval: session.Duration(time.Duration(200+(i*37)%301) * time.Millisecond),
			Labels:   map[string]string{"demo": "true"},
		}
		if err := store.Put(ctx, s); err != nil {
			return fmt.Errorf("demo: add session: %w", err)
		}
		d.sessions = append(d.sessions, id)
	}
	return nil
}

// script runs the scenario: start, graceful stop of worker-2, a newcomer,
// end. It returns early when ctx is done.
func (d *demo) script(ctx context.Context, start time.Time) error {
	at := func(frac float64) time.Time { return start.Add(time.Duration(frac * float64(d.opts.Duration))) }
	stopAt, joinAt, endAt := at(1.0/3), at(7.0/12), at(1)

	var names []string
	for i := range d.opts.Workers {
		names = append(names, fmt.Sprintf("worker-%d", i+1))
	}
	d.rec.logf("%d sessions on %d HTTP targets, embedded Redis at %s; starting %s",
		len(d.sessions), len(d.targets), d.mr.Addr(), strings.Join(names, ", "))
	d.rec.logf("leader election on this Redis, from the repository in another terminal: %s", d.electionCommand())
	for _, n := range names {
		if err := d.startWorker(ctx, n); err != nil {
			return err
		}
	}

	// A graceful stop: the worker stops its polls, releases its leases and
	// tells the others, who take the sessions at once.
	if !sleepUntil(ctx, stopAt) {
		return nil
	}
	w := d.worker(demoStopped)
	owned := d.rec.ownedBy(w.name)
	slices.Sort(owned)
	t0 := d.rec.since()
	d.rec.logf("stopping %s gracefully (it holds %d sessions)", w.name, len(owned))
	if err := d.stopWorker(w); err != nil {
		d.rec.logf("%s: drain failed: %v", w.name, err)
	} else {
		d.rec.logf("%s drained in %v", w.name, (d.rec.since() - t0).Round(time.Millisecond))
	}
	d.await(ctx, joinAt, func() bool {
		_, done, _ := d.rec.moved(owned, w.name, t0)
		return done
	})
	to, done, last := d.rec.moved(owned, w.name, t0)
	if done {
		d.rec.logf("%s's %d sessions now polled by %s, %v after the stop", w.name, len(owned), countBy(to), (last - t0).Round(time.Millisecond))
	} else {
		d.rec.logf("%s's sessions: %d of %d moved so far (%s)", w.name, len(to), len(owned), countBy(to))
	}

	// A newcomer takes the sessions that rendezvous hashing gives it.
	if !sleepUntil(ctx, joinAt) {
		return nil
	}
	name := fmt.Sprintf("worker-%d", d.opts.Workers+1)
	t1 := d.rec.since()
	if err := d.startWorker(ctx, name); err != nil {
		return err
	}
	// The workers' own assignment: rendezvous hashing with bounded loads.
	var share []string
	table := hrw.NewIDs(d.liveNames()...)
	for i, o := range table.AssignBounded(d.sessions, poller.DefaultBalanceSlack, nil) {
		if table.ID(o) == name {
			share = append(share, d.sessions[i])
		}
	}
	d.rec.logf("%s joins; rendezvous hashing with bounded loads gives it %d of %d sessions", name, len(share), len(d.sessions))
	d.await(ctx, endAt.Add(-d.opts.Duration/12), func() bool {
		_, done, _ := d.rec.taken(share, name, t1)
		return done
	})
	from, done, last := d.rec.taken(share, name, t1)
	if done {
		d.rec.logf("%s took its share: %d sessions (from %s), %v after joining", name, len(share), countBy(from), (last - t1).Round(time.Millisecond))
	} else {
		d.rec.logf("%s has taken %d of its %d sessions so far", name, len(from), len(share))
	}

	sleepUntil(ctx, endAt)
	return nil
}

// electionCommand is the command line that runs the leader-election
// example (examples/election) against the demo's embedded Redis.
func (d *demo) electionCommand() string {
	return "go run ./examples/election --redis " + d.mr.Addr()
}

// startWorker starts an in-process worker with the HTTP poller.
func (d *demo) startWorker(ctx context.Context, name string) error {
	client := redis.NewClient(&redis.Options{Addr: d.mr.Addr(), ClientName: "pollworker-demo:" + name})
	log := d.log.With(zap.String("instance", name))
	hp, err := httppoll.New(httppoll.Config{Client: client, Keys: d.keys, Worker: name, Logger: log})
	if err != nil {
		_ = client.Close()
		return err
	}
	coord, err := poller.New(poller.Config{
		Client:            client,
		Keys:              d.keys,
		ID:                name,
		Version:           version,
		Poller:            d.rec.wrap(name, hp),
		LeaseTTL:          demoLeaseTTL,
		RenewInterval:     demoRenewInterval,
		HeartbeatInterval: demoHeartbeatInterval,
		DiscoveryInterval: demoDiscoveryInterval,
		DrainTimeout:      demoDrainTimeout,
		Logger:            log,
		OnEvent:           d.rec.onEvent(name),
	})
	if err != nil {
		_ = client.Close()
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &demoWorker{name: name, client: client, hp: hp, coord: coord, cancel: cancel, done: make(chan struct{}), joinedAt: d.rec.since()}
	d.mu.Lock()
	d.workers = append(d.workers, w)
	d.mu.Unlock()
	go func() {
		defer close(w.done)
		w.err = coord.Run(wctx)
	}()
	return nil
}

// stopWorker cancels w and waits for its drain, then closes its
// connections.
func (d *demo) stopWorker(w *demoWorker) error {
	if w.stopping.Swap(true) {
		<-w.done
		return nil
	}
	w.stopAt.Store(int64(d.rec.since()))
	w.cancel()
	<-w.done
	w.hp.CloseIdleConnections()
	_ = w.client.Close()
	return w.err
}

// stopAll stops the workers that still run, all at once.
func (d *demo) stopAll() {
	var wg sync.WaitGroup
	running := 0
	for _, w := range d.snapshot() {
		if w.stopping.Load() {
			continue
		}
		running++
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.stopWorker(w); err != nil {
				d.rec.logf("%s: drain failed: %v", w.name, err)
			}
		}()
	}
	if running > 0 {
		d.rec.logf("stopping the %d remaining workers", running)
	}
	wg.Wait()
}

func (d *demo) snapshot() []*demoWorker {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.workers)
}

func (d *demo) worker(name string) *demoWorker {
	for _, w := range d.snapshot() {
		if w.name == name {
			return w
		}
	}
	return nil
}

// liveNames are the workers not stopped.
func (d *demo) liveNames() []string {
	var out []string
	for _, w := range d.snapshot() {
		if !w.stopping.Load() {
			out = append(out, w.name)
		}
	}
	return out
}

// await polls cond every 10ms until it holds, deadline passes or ctx is
// done.
func (d *demo) await(ctx context.Context, deadline time.Time, cond func() bool) {
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for !cond() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// sleepUntil waits until t; it reports false if ctx was done first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// countBy formats how many sessions each worker got: "worker-1 (4), worker-3 (5)".
func countBy(m map[string]string) string {
	n := map[string]int{}
	for _, w := range m {
		n[w]++
	}
	var names []string
	for w := range n {
		names = append(names, w)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, w := range names {
		parts[i] = fmt.Sprintf("%s (%d)", w, n[w])
	}
	if len(parts) == 0 {
		return "nobody yet"
	}
	return strings.Join(parts, ", ")
}

// summary prints the totals and returns an error if the promise was broken.
func (d *demo) summary(out io.Writer, elapsed time.Duration, streamLen int64) error {
	t := d.rec.totals()
	var requests, rejected int
	for _, tg := range d.targets {
		r, s := tg.counts()
		requests += r
		rejected += s
	}
	fmt.Fprintf(out, "\nsummary after %v: %d sessions, %d workers\n", elapsed.Round(100*time.Millisecond), len(d.sessions), len(d.snapshot()))
	for _, w := range d.snapshot() {
		note := ""
		switch {
		case w.joinedAt > time.Second/2:
			note = fmt.Sprintf(" (joined at %v)", w.joinedAt.Round(100*time.Millisecond))
		case w.name == demoStopped:
			note = fmt.Sprintf(" (stopped at %v)", time.Duration(w.stopAt.Load()).Round(100*time.Millisecond))
		}
		fmt.Fprintf(out, "  %-9s %5d polls, %d failed%s\n", w.name, t.polls[w.name], t.failed[w.name], note)
	}
	fmt.Fprintf(out, "  handoffs seen: %d (a poll by another worker than the session's previous poll)\n", t.handoffs)
	fmt.Fprintf(out, "  highest fencing token: %d (session %s)\n", t.topToken, dash(t.topSession))
	fmt.Fprintf(out, "  polls aborted by a handoff or shutdown: %d\n", t.aborted)
	fmt.Fprintf(out, "  targets: %d requests, %d rejected for a stale fencing token\n", requests, rejected)
	if streamLen >= 0 {
		fmt.Fprintf(out, "  results stream %s: %d entries\n", d.keys.Results(), streamLen)
	}
	fmt.Fprintf(out, "  sessions polled by two workers at the same time: %d\n", t.overlaps)
	fmt.Fprintf(out, "  polls with a fencing token older than one already used: %d\n", t.stale)
	for _, p := range t.problems {
		fmt.Fprintf(out, "  ! %s\n", p)
	}
	if t.overlaps > 0 || t.stale > 0 || rejected > 0 {
		return fmt.Errorf("demo: the one-poller-at-a-time promise was broken: %d overlapping polls, %d stale tokens, %d rejected by targets", t.overlaps, t.stale, rejected)
	}
	fmt.Fprintln(out, "OK: every session was polled by one worker at a time, with increasing fencing tokens.")
	return nil
}
