package poller

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

// TestSchedulerOverrunPollGivesItsSlotToTheWaiting: with every slot
// taken, a poll that overran its interval (so is due again at once) queues
// behind the polls already waiting instead of keeping its slot. Before,
// the sessions whose polls overran kept every slot and the others were
// never polled.
func TestSchedulerOverrunPollGivesItsSlotToTheWaiting(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) { c.Limit = 1 })
	a := f.start("a")
	pa := f.nextPoll()
	b := f.start("b")
	f.waitPhase(b, admitting)
	f.clock.Step(2 * schedInterval) // a overran its interval: due again at once
	close(pa.finish)
	pb := f.nextPoll()
	require.Equal(t, b, pb.w, "the slot goes to b, which waited, not back to a")
	f.waitPhase(a, admitting)
	close(pb.finish) // b overran too: a, waiting, goes first
	pa = f.nextPoll()
	require.Equal(t, a, pa.w)
	f.waitPhase(b, admitting)
	close(pa.finish)
	pb = f.nextPoll()
	require.Equal(t, b, pb.w)
	close(pb.finish)
	f.waitPhase(a, queued)
	f.waitPhase(b, queued)
	st := f.sched.Stats(false)
	require.EqualValues(t, 3, st.Deferred)
}

// TestSchedulerRanksABehindPollByItsStart: a session due again at once
// after its poll ends waits among the waiting polls by when it fell due
// (one interval after its poll was due), not by when its poll ended. x's
// poll runs 1.8 s (a target answering slowly, or a poll waiting for a
// processor): z, due at 1.2 s, waits behind x, due again at 1 s. Before,
// x queued at its end (1.8 s), behind z: under overload a session whose
// poll took longer waited longer for its next one, and gaps between the
// polls' starts varied with the polls' durations.
func TestSchedulerRanksABehindPollByItsStart(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) { c.Limit = 1 })
	x := f.start("x")
	px := f.nextPoll() // t = 0: x takes the only slot
	f.clock.Step(200 * time.Millisecond)
	y := f.start("y") // due at 0.2 s
	f.waitPhase(y, admitting)
	f.clock.Step(time.Second)
	z := f.start("z") // due at 1.2 s
	f.waitPhase(z, admitting)
	f.clock.Step(600 * time.Millisecond)
	close(px.finish) // t = 1.8 s: x's next poll was due at 1 s
	py := f.nextPoll()
	require.Equal(t, y, py.w, "y waited longest")
	f.waitPhase(x, admitting)
	close(py.finish)
	p := f.nextPoll()
	require.Equal(t, x, p.w, "x, due at 1 s, before z, due at 1.2 s")
	f.waitPhase(z, admitting)
	close(p.finish)
	pz := f.nextPoll()
	require.Equal(t, z, pz.w)
	close(pz.finish)
	close(f.nextPoll().finish) // y again: due at 1.2 s
	for _, w := range []*pollLoop{x, y, z} {
		f.waitPhase(w, queued)
	}
}

// overloadObserver records what the control plane did during a flood:
// each renewal cycle, and every lease that left Held and every Redis error.
type overloadObserver struct {
	NopObserver
	mu           sync.Mutex
	renewals     []time.Time // when each renewal cycle was reported
	maxRoundTrip time.Duration
	broken       []string // leases that went uncertain or lost, Redis errors
}

func (o *overloadObserver) RenewCycle(r RenewReport) {
	rt, renewed, lost, uncertain := r.RoundTrip, r.Renewed, r.Lost, r.Uncertain
	o.mu.Lock()
	defer o.mu.Unlock()
	o.renewals = append(o.renewals, time.Now())
	o.maxRoundTrip = max(o.maxRoundTrip, rt)
	if lost+uncertain > 0 {
		o.broken = append(o.broken, fmt.Sprintf("renewal: %d renewed, %d lost, %d uncertain (round trip %v)", renewed, lost, uncertain, rt))
	}
}

func (o *overloadObserver) LeaseEvent(e Event) {
	t, reason := e.Type, e.Reason
	if t == EventUncertain || t == EventLost {
		o.mu.Lock()
		o.broken = append(o.broken, fmt.Sprintf("lease %s (%s)", t, reason))
		o.mu.Unlock()
	}
}

func (o *overloadObserver) RedisError(op string) {
	o.mu.Lock()
	o.broken = append(o.broken, "redis error: "+op)
	o.mu.Unlock()
}

// failed reports whether a lease left Held or a Redis operation failed.
func (o *overloadObserver) failed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.broken) > 0
}

// renewalsSince returns the renewal cycles reported since from, and the
// longest time between two of them (or from from to the first).
func (o *overloadObserver) renewalsSince(from time.Time) (n int, maxGap time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	prev := from
	for _, at := range o.renewals {
		if at.Before(from) {
			continue
		}
		n++
		maxGap = max(maxGap, at.Sub(prev))
		prev = at
	}
	return n, maxGap
}

// TestOverloadNeverStarvesTheControlPlane is issue 13's acceptance test
// of overload: one worker against a real redis-server holds 1,000
// sessions due every 20 ms (50,000 polls/s) while its target answers each
// poll in 100 ms and it may run 16 polls at once (160 polls/s): 300 times
// past its capacity. Each poll also writes its result to Redis, on its own
// client as the built-in poller's recorder does. Throughout, the control
// plane stays on time: every renewal cycle completes within the request
// timeout and at most two renew intervals after the previous one, no lease
// ever leaves Held, no Redis operation fails, and the heartbeat entry never
// comes near expiry. Meanwhile the polls are admitted, at most 16 at once
// and oldest first (many different sessions get polled), the others
// deferred and counted late, and the worker reports itself behind while
// staying ready.
func TestOverloadNeverStarvesTheControlPlane(t *testing.T) {
	const (
		sessions = 1000
		interval = 20 * time.Millisecond
		maxPolls = 16
		answerIn = 100 * time.Millisecond
	)
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true}) // as the binary's
	t.Cleanup(func() { _ = client.Close() })
	results := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 2}) // the recorder's own client
	t.Cleanup(func() { _ = results.Close() })
	watch := srv.Client(t) // the test's own reads
	addSessions(t, client, sessions, interval)

	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // a slow target
		case <-r.Context().Done():
		case <-time.After(answerIn):
		}
	}))
	t.Cleanup(target.Close)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: maxPolls}}
	t.Cleanup(hc.CloseIdleConnections)

	var running, maxRunning atomic.Int64
	var polledMu sync.Mutex
	polled := map[string]int{}
	poll := PollFunc(func(ctx context.Context, tn *Turn) error {
		s, l := tn.Session(), tn.lease
		n := running.Add(1)
		defer running.Add(-1)
		for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.URL+"/"+s.ID, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		err = results.XAdd(ctx, &redis.XAddArgs{Stream: "overload:results", MaxLen: 10_000, Approx: true,
			Values: []any{"session", s.ID, "token", l.Token()}}).Err()
		polledMu.Lock()
		polled[s.ID]++
		polledMu.Unlock()
		return err
	})
	distinct := func() int {
		polledMu.Lock()
		defer polledMu.Unlock()
		return len(polled)
	}

	obs := &overloadObserver{}
	cfg := Config{Client: client, ID: "w1", Poller: poll, MaxPolls: maxPolls, Observer: obs,
		// Request timeouts of 250ms (RenewInterval/2), some 25 times the
		// round trips seen here: a starved control plane fails, a busy
		// machine does not.
		LeaseTTL: 3 * time.Second, RenewInterval: 500 * time.Millisecond,
		HeartbeatInterval: 500 * time.Millisecond, DiscoveryInterval: 2 * time.Second,
		DrainTimeout: 2 * time.Second}
	w := start(t, cfg)
	c := w.c
	require.Eventually(t, func() bool { return len(c.Status().Owned) == sessions && c.Ready() },
		15*time.Second, 5*time.Millisecond, "the worker never held every session")
	flood := time.Now()

	// The heartbeat entry and readiness, sampled every 10ms until the end.
	var minTTL atomic.Int64
	minTTL.Store(int64(time.Hour))
	var unready atomic.Int64
	stopWatch := make(chan struct{})
	var watching sync.WaitGroup
	watching.Add(1)
	go func() {
		defer watching.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopWatch:
				return
			case <-tick.C:
			}
			ttl, err := watch.PTTL(context.Background(), keyspace.Space{}.Node("w1")).Result()
			if err == nil && ttl < time.Duration(minTTL.Load()) {
				minTTL.Store(int64(ttl)) // -2ns: the entry expired
			}
			if !c.Ready() {
				unready.Add(1)
			}
		}
	}()

	// Flood on until the worker says it is behind, eight renewal cycles
	// have gone by, and the polls have gone round many sessions; or until
	// the control plane breaks, which the checks below report.
	if !assert.Eventually(t, func() bool {
		renewals, _ := obs.renewalsSince(flood)
		return obs.failed() || c.PollStats().Behind && renewals >= 8 && distinct() >= 8*maxPolls
	}, 30*time.Second, 10*time.Millisecond) {
		t.Fatalf("after %v: %+v, %d sessions polled", time.Since(flood), c.PollStats(), distinct())
	}
	close(stopWatch)
	watching.Wait()
	ps := c.PollStats()
	renewals, maxGap := obs.renewalsSince(flood)
	obs.mu.Lock()
	t.Logf("flood of %v: %d renewal cycles (longest gap %v, longest round trip %v), heartbeat TTL left at least %v, %+v, %d sessions polled",
		time.Since(flood).Round(time.Millisecond), renewals, maxGap, obs.maxRoundTrip, time.Duration(minTTL.Load()), ps, distinct())
	obs.mu.Unlock()

	// The control plane kept its time.
	obs.mu.Lock()
	broken, maxRoundTrip := obs.broken, obs.maxRoundTrip
	obs.mu.Unlock()
	require.Empty(t, broken[:min(len(broken), 5)], "no lease left Held, no Redis operation failed (%d problems)", len(broken))
	require.Less(t, maxRoundTrip, c.cfg.RequestTimeout, "every renewal within the request timeout")
	require.LessOrEqual(t, maxGap, 2*cfg.RenewInterval, "renewal cycles every renew interval")
	require.Greater(t, time.Duration(minTTL.Load()), c.cfg.HeartbeatTTL/4, "the heartbeat entry never came near expiry")
	require.Zero(t, unready.Load(), "ready throughout: being behind does not make it unready")
	require.Len(t, c.Status().Owned, sessions)

	// The polls were admitted up to the limit, the rest deferred and counted.
	require.LessOrEqual(t, maxRunning.Load(), int64(maxPolls), "never more than MaxPolls polls at once")
	require.LessOrEqual(t, ps.Running, maxPolls)
	require.Positive(t, ps.Waiting, "due polls wait for a slot")
	require.GreaterOrEqual(t, ps.Deferred, int64(sessions-maxPolls), "every session beyond the limit was deferred")
	require.Positive(t, ps.Late)
	require.True(t, ps.Behind)
	require.True(t, c.Status().Behind)
	w.stop(t)
}
