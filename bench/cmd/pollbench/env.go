package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/bench/baseline"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
)

// env is the redis-server of one run and an admin client to it.
type env struct {
	redis *bench.Redis
	admin *redis.Client
	keys  keyspace.Space
	// counter counts the commands of every worker client (not the admin's).
	counter *bench.Counter
	logger  *zap.Logger // nil = no logs
	// acquired counts the leases every worker acquired (EventAcquired).
	acquired atomic.Int64
	// rounds counts every worker's rounds, memberRounds those that saw
	// the membership change (Observer.Round).
	rounds, memberRounds atomic.Int64
}

// benchObserver counts a worker's acquisitions and rounds into its env,
// and passes each acquisition to hooks.
type benchObserver struct {
	poller.NopObserver
	e     *env
	id    string
	hooks []ourHooks
}

// LeaseEvent counts an acquisition.
func (o benchObserver) LeaseEvent(ev poller.Event) {
	if ev.Type == poller.EventAcquired {
		o.e.acquired.Add(1)
		for _, h := range o.hooks {
			h.acquired(ev.Session, o.id, ev.At)
		}
	}
}

// Round counts a round.
func (o benchObserver) Round(r poller.RoundReport) {
	o.e.rounds.Add(1)
	if r.MembershipChanged {
		o.e.memberRounds.Add(1)
	}
}

func newEnv(ctx context.Context) (*env, error) {
	r, err := bench.StartRedis(ctx)
	if err != nil {
		return nil, err
	}
	// The admin client flushes, seeds and reads INFO between runs: a
	// FLUSHALL of a 1M-session cold start (4M keys) outlasts go-redis's 3 s
	// default read timeout on a loaded machine.
	admin := redis.NewClient(&redis.Options{Addr: r.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	return &env{redis: r, admin: admin, counter: &bench.Counter{}}, nil
}

func (e *env) close() {
	_ = e.admin.Close()
	e.redis.Stop()
}

// reset empties Redis and its statistics, and declares the keyspace fresh
// (lease.MarkFresh): a measured fleet starts on a new deployment, not
// after a data loss, so it does not wait out the loss quarantine.
func (e *env) reset(ctx context.Context) error {
	if err := e.admin.FlushAll(ctx).Err(); err != nil {
		return err
	}
	if err := e.admin.ScriptFlush(ctx).Err(); err != nil {
		return err
	}
	if _, err := lease.MarkFresh(ctx, e.admin, e.keys); err != nil {
		return err
	}
	return e.admin.ConfigResetStat(ctx).Err()
}

func (e *env) client(addr string, poolSize int) *redis.Client {
	if addr == "" {
		addr = e.redis.Addr()
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
	c.AddHook(e.counter)
	return c
}

// member is one in-process worker of either design.
type member struct {
	id     string
	coord  *poller.Coordinator // nil for a baseline worker
	base   *baseline.Worker
	client *redis.Client
	cancel context.CancelFunc
	done   chan error
}

// count is the number of leases the member holds (with their poll loops
// running: PollStats.LeasesHeld, no list made).
func (m *member) count() int {
	if m.coord != nil {
		return m.coord.PollStats().LeasesHeld
	}
	return m.base.Count()
}

// held returns the sessions whose lease the member holds.
func (m *member) held() []string {
	if m.coord != nil {
		return m.coord.Status().Owned
	}
	return nil
}

// stop cancels the member and waits for Run to return.
func (m *member) stop() error {
	m.cancel()
	err := <-m.done
	_ = m.client.Close()
	return err
}

// timings are the intervals a fleet runs with.
type timings struct {
	ttl, renew, heartbeat, discovery, drain time.Duration
}

func defaultTimings() timings {
	return timings{ttl: 30 * time.Second, renew: 10 * time.Second, heartbeat: 10 * time.Second,
		discovery: 10 * time.Second, drain: 10 * time.Second}
}

// scaled returns timings with TTL ttl and every interval ttl/3.
func scaled(ttl time.Duration) timings {
	return timings{ttl: ttl, renew: ttl / 3, heartbeat: ttl / 3, discovery: ttl / 3, drain: ttl / 3}
}

// startOurs starts a pollworker coordinator named id whose client connects
// to addr ("" = the server directly); its polls go to rec.
func (e *env) startOurs(id, addr string, t timings, rec *bench.Recorder, hooks ...ourHooks) (*member, error) {
	return e.startWeighted(id, addr, 0, t, rec, hooks...)
}

// startWeighted is startOurs of a worker declaring weight (0 means 1).
func (e *env) startWeighted(id, addr string, weight float64, t timings, rec *bench.Recorder, hooks ...ourHooks) (*member, error) {
	client := e.client(addr, 0)
	c, err := poller.New(poller.Config{
		Client: client, Keys: e.keys, ID: id, Weight: weight,
		Poller: poller.PollFunc(func(_ context.Context, tn *poller.Turn) error {
			s := tn.Session()
			for _, h := range hooks {
				h.poll(s.ID, id)
			}
			rec.Poll(s.ID, id)
			return nil
		}),
		LeaseTTL: t.ttl, RenewInterval: t.renew, HeartbeatInterval: t.heartbeat,
		DiscoveryInterval: t.discovery, DrainTimeout: t.drain, Logger: e.logger,
		Observer: benchObserver{e: e, id: id, hooks: hooks},
	})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{id: id, coord: c, client: client, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- c.Run(ctx) }()
	return m, nil
}

// ourHooks are further observers of a worker started by startOurs: every
// poll and every acquisition (session, worker, and for an acquisition its
// time).
type ourHooks interface {
	poll(session, worker string)
	acquired(session, worker string, at time.Time)
}

// startBaseline starts a baseline worker named id.
func (e *env) startBaseline(id string, t timings, rec *bench.Recorder) *member {
	client := e.client("", 0)
	w := baseline.New(baseline.Config{Client: client, Keys: e.keys, ID: id, TTL: t.ttl,
		RenewInterval: t.renew, HeartbeatTTL: 3 * t.heartbeat, DiscoveryInterval: t.discovery,
		Poll: rec.Poll})
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{id: id, base: w, client: client, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- w.Run(ctx) }()
	return m
}

// stopAll stops members concurrently.
func stopAll(ms []*member) {
	var wg sync.WaitGroup
	for _, m := range ms {
		if m == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.stop() }()
	}
	wg.Wait()
}

var errTimeout = errors.New("timed out")

// waitFor polls cond every 10ms until it holds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w after %v", what, errTimeout, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// waitChan waits for ch until timeout.
func waitChan(ctx context.Context, ch <-chan struct{}, timeout time.Duration, what string) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("%s: %w after %v", what, errTimeout, timeout)
	}
}

// settled waits until the members hold exactly n leases in total and every
// session was polled, and that total stays put for settle.
func settled(ctx context.Context, ms []*member, rec *bench.Recorder, n int, timeout time.Duration) error {
	if err := waitChan(ctx, rec.WaitPolled(n), timeout, fmt.Sprintf("all %d sessions polled", n)); err != nil {
		return err
	}
	total := func() int {
		t := 0
		for _, m := range ms {
			t += m.count()
		}
		return t
	}
	return waitFor(ctx, timeout, fmt.Sprintf("%d leases held", n), func() bool { return total() == n })
}

func workerIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return ids
}
