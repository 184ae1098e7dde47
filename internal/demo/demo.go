// Package demo is `pollworker demo`: in-process workers (poller.Coordinator
// with the HTTP poller) share sessions through an embedded Redis
// (miniredis), one stops gracefully, a newcomer joins, and the demo prints
// what happened.
//
// It is a client of the library like any other. Its predictions come from
// the planner the workers use (package assign), with the bucket weights the
// workers read (session.Store.Weights); what it reports as having happened
// comes from what it recorded (every poll, timed around Poller.Poll, and
// every lease event the workers report); its end-of-run checks are those of
// package history, shared with the integration tests.
//
// # Guarantees
//
//   - Every number printed is computed from the recorder, at the moment the
//     line is stamped with, or from the planner; a line says "as planned"
//     only when every session's lease was held by its planned worker at
//     that moment.
//   - Run returns only after every worker, target and Redis it started has
//     stopped.
//
// # Non-guarantees
//
//   - Crashes are not simulated: a worker in this process only stops
//     gracefully.
//   - The placement is not promised to match the plan by any given time: a
//     handoff takes a few milliseconds, but a worker may keep a session it
//     took recently; the demo waits for it (Options.SettleTimeout, which
//     stretches the run on a slow machine) and otherwise says which
//     sessions are elsewhere.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/internal/history"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// Timings of the demo's workers: short, so that things happen while one
// watches.
const (
	LeaseTTL          = 1500 * time.Millisecond
	RenewInterval     = 500 * time.Millisecond
	HeartbeatInterval = 300 * time.Millisecond
	DiscoveryInterval = 500 * time.Millisecond
	DrainTimeout      = 2 * time.Second
	// BalanceSlack is the workers' poller.Config.BalanceSlack, and the
	// slack the demo's predictions use.
	BalanceSlack = poller.DefaultBalanceSlack
	// Targets is the number of HTTP targets.
	Targets = 3
	// Stopped is the worker the script stops.
	Stopped = "worker-2"
	// DefaultSettleTimeout is the default of Options.SettleTimeout.
	DefaultSettleTimeout = 30 * time.Second
)

// Options configure a run.
type Options struct {
	// Duration of the run, 1s to 10m. The stop comes at a third of it, the
	// join at 7/12.
	Duration time.Duration
	// Workers at the start, 2 to 8; one more joins later.
	Workers int
	// Sessions polled, 1 to 100.
	Sessions int
	// Plain prints periodic lines even on a terminal.
	Plain bool
	// SettleTimeout bounds how long the demo waits, after each change and
	// at the end, for every session to be held by its planned worker
	// before it reports the placement and goes on; default 30s. A fast
	// machine takes milliseconds and Duration sets the pace; a slow one
	// stretches the run (see script).
	SettleTimeout time.Duration
	// Logger receives the workers' logs; default none.
	Logger *zap.Logger
	// Version is the workers' version string.
	Version string
}

// Validate reports the first option out of range.
func (o Options) Validate() error {
	switch {
	case o.Duration < time.Second || o.Duration > 10*time.Minute:
		return fmt.Errorf("demo: Duration (%v) must be between 1s and 10m", o.Duration)
	case o.Workers < 2 || o.Workers > 8:
		return fmt.Errorf("demo: Workers (%d) must be between 2 and 8", o.Workers)
	case o.Sessions < 1 || o.Sessions > 100:
		return fmt.Errorf("demo: Sessions (%d) must be between 1 and 100", o.Sessions)
	}
	return nil
}

// ErrBroken is returned when the recorded history breaks the
// one-poller-at-a-time promise.
var ErrBroken = errors.New("demo: the one-poller-at-a-time promise was broken")

// Result is what a run recorded, for tests.
type Result struct {
	// Start is the demo's time zero: printed times are since then.
	Start time.Time
	// History holds every finished poll and every lease change.
	History history.History
	// Failed are the polls that ended with an error (not a cancellation).
	Failed []history.Poll
	// Requests and Rejected are the targets' counts (all requests, and
	// those rejected for a stale fencing token).
	Requests, Rejected int
	// StreamLen is the length of the results stream, -1 if unread.
	StreamLen int64
}

// demo is one run.
type demo struct {
	opts     Options
	log      *zap.Logger
	mr       *miniredis.Miniredis
	keys     keyspace.Space
	store    *session.Store // the demo's own client: adds sessions, reads sizes
	sessions []string       // ids, sorted
	targets  []*target
	rec      *recorder

	mu      sync.Mutex
	workers []*worker // guarded by mu; in start order
}

// worker is one in-process worker.
type worker struct {
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

// Run runs the demo, printing to out, and returns what it recorded (also
// with an error). The error wraps ErrBroken if the promise was broken.
// Cancelling ctx ends the demo early, with its summary.
func Run(ctx context.Context, o Options, out io.Writer) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.SettleTimeout <= 0 {
		o.SettleTimeout = DefaultSettleTimeout
	}
	start := time.Now()
	d := &demo{opts: o, log: o.Logger, rec: newRecorder(start)}
	if d.log == nil {
		d.log = zap.NewNop()
	}

	d.mr = miniredis.NewMiniRedis()
	if err := d.mr.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("demo: start embedded redis: %w", err)
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
	for range Targets {
		t, err := startTarget()
		if err != nil {
			return nil, fmt.Errorf("demo: start target: %w", err)
		}
		d.targets = append(d.targets, t)
	}
	admin := redis.NewClient(&redis.Options{Addr: d.mr.Addr(), ClientName: "pollworker-demo"})
	defer func() { _ = admin.Close() }()
	var err error
	if d.store, err = session.NewStore(admin, d.keys); err != nil {
		return nil, err
	}
	// The embedded Redis is new: no lease was ever granted in it, so the
	// workers need not wait out the loss quarantine (lease.MarkFresh).
	if _, err := lease.MarkFresh(ctx, admin, d.keys); err != nil {
		return nil, err
	}
	if err := d.addSessions(ctx); err != nil {
		return nil, err
	}

	v := newView(d, out, start, !o.Plain && isTerminal(out))
	viewDone := make(chan struct{})
	stopView := make(chan struct{})
	go func() { defer close(viewDone); v.run(stopView) }()

	scriptErr := d.script(ctx, start)
	d.stopAll()
	close(stopView)
	<-viewDone

	res := &Result{Start: start, StreamLen: -1}
	if n, err := admin.XLen(context.Background(), d.keys.Results()).Result(); err == nil {
		res.StreamLen = n
	}
	var polls []pollRecord
	res.History, polls = d.rec.history(time.Now())
	for _, p := range polls {
		if p.Failed {
			res.Failed = append(res.Failed, p.Poll)
		}
	}
	for _, t := range d.targets {
		r, s := t.counts()
		res.Requests += r
		res.Rejected += s
	}
	return res, errors.Join(scriptErr, d.summary(out, res))
}

// addSessions registers the sessions, spread over the targets.
func (d *demo) addSessions(ctx context.Context) error {
	for i := range d.opts.Sessions {
		id := fmt.Sprintf("s%02d", i+1)
		s := session.Session{
			ID:       id,
			URL:      d.targets[i%len(d.targets)].url + "/poll/" + id,
			Interval: session.Duration(sessionInterval(i)),
			Labels:   map[string]string{"demo": "true"},
		}
		if err := d.store.Put(ctx, s); err != nil {
			return fmt.Errorf("demo: add session: %w", err)
		}
		d.sessions = append(d.sessions, id)
	}
	return nil
}

// sessionInterval is the poll interval of the demo's i-th session (from
// 0): 200ms to 500ms, so that sessions weigh differently.
func sessionInterval(i int) time.Duration {
	return time.Duration(200+(i*37)%301) * time.Millisecond
}

// plan asks the planner where the sessions go among workers, as the
// workers themselves do (fleet.Planner.Place): same bucket weights (the
// poll loads the writers keep, read from the store), same slack, equal
// worker weights (the demo's workers keep theirs). plain is the placement
// without the bound, to explain it.
func (d *demo) plan(ctx context.Context, workers []string) (plan, plain *fleet.Plan, err error) {
	w, err := d.store.Weights(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("demo: read bucket weights: %w", err)
	}
	bounded, err := fleet.NewPlanner(BalanceSlack).Place(fleet.Equal(workers...), w.Plannable(), w.Spaces, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("demo: plan: %w", err)
	}
	unbounded, err := fleet.NewPlanner(-1).Place(fleet.Equal(workers...), w.Plannable(), w.Spaces, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("demo: plan: %w", err)
	}
	return bounded.Default, unbounded.Default, nil
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
		Version:           d.opts.Version,
		Poller:            d.rec.wrap(name, hp),
		LeaseTTL:          LeaseTTL,
		RenewInterval:     RenewInterval,
		HeartbeatInterval: HeartbeatInterval,
		DiscoveryInterval: DiscoveryInterval,
		DrainTimeout:      DrainTimeout,
		BalanceSlack:      BalanceSlack,
		// The demo shows placement against the plan of equal weights: a
		// worker slowed by a busy machine (or -race) keeps its weight
		// rather than shedding, so what is shown stays what was planned.
		KeepWeightWhenBehind: true,
		Logger:               log,
		Observer:             poller.LeaseEvents(d.rec.onEvent(name)),
	})
	if err != nil {
		_ = client.Close()
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &worker{name: name, client: client, hp: hp, coord: coord, cancel: cancel, done: make(chan struct{}), joinedAt: d.rec.since()}
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
func (d *demo) stopWorker(w *worker) error {
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
	var running []*worker
	for _, w := range d.snapshot() {
		if !w.stopping.Load() {
			running = append(running, w)
		}
	}
	if len(running) == 0 {
		return
	}
	d.rec.logf(nil, "stopping the %d remaining workers", len(running))
	var wg sync.WaitGroup
	for _, w := range running {
		wg.Go(func() {
			if err := d.stopWorker(w); err != nil {
				d.rec.logf(nil, "%s: drain failed: %v", w.name, err)
			}
		})
	}
	wg.Wait()
}

func (d *demo) snapshot() []*worker {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.workers)
}

func (d *demo) worker(name string) *worker {
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
