package poller

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// parallelTests is how many parallel tests of this package run at once
// unless -test.parallel says otherwise. Most of them wait on lease TTLs and
// poll intervals of a real clock, not on the CPU, so the default of
// GOMAXPROCS (2 on CI) would leave the package waiting in series.
const parallelTests = 4

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit && runtime.GOMAXPROCS(0) < parallelTests {
		if err := flag.Set("test.parallel", strconv.Itoa(parallelTests)); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"))
}

// recorder is a Poller shared by several workers that checks the promise:
// never two polls of one session at once, tokens never going backwards.
type recorder struct {
	mu         sync.Mutex
	active     map[string]string // session -> worker polling it now
	maxToken   map[string]int64
	tokenOwner map[int64]map[string]string // token -> session -> worker
	last       map[string]string           // session -> worker of the last poll
	count      map[string]int
	violations []string
	work       time.Duration
}

func newRecorder() *recorder {
	return &recorder{active: map[string]string{}, maxToken: map[string]int64{},
		tokenOwner: map[int64]map[string]string{}, last: map[string]string{}, count: map[string]int{},
		work: 2 * time.Millisecond}
}

func (r *recorder) poller(worker string) Poller {
	return PollFunc(func(ctx context.Context, tn *Turn) error {
		s, l := tn.Session(), tn.lease
		r.mu.Lock()
		if w, ok := r.active[s.ID]; ok {
			r.violations = append(r.violations, fmt.Sprintf("overlap on %s: %s and %s", s.ID, w, worker))
		}
		if l.Token() < r.maxToken[s.ID] {
			r.violations = append(r.violations, fmt.Sprintf("stale token on %s: %d < %d", s.ID, l.Token(), r.maxToken[s.ID]))
		}
		r.maxToken[s.ID] = max(r.maxToken[s.ID], l.Token())
		if r.tokenOwner[l.Token()] == nil {
			r.tokenOwner[l.Token()] = map[string]string{}
		}
		if w, ok := r.tokenOwner[l.Token()][s.ID]; ok && w != worker {
			r.violations = append(r.violations, fmt.Sprintf("token %d of %s used by %s and %s", l.Token(), s.ID, w, worker))
		}
		r.tokenOwner[l.Token()][s.ID] = worker
		r.active[s.ID] = worker
		r.last[s.ID] = worker
		r.count[s.ID]++
		r.mu.Unlock()

		select { // the poll's work
		case <-ctx.Done():
		case <-time.After(r.work):
		}

		r.mu.Lock()
		delete(r.active, s.ID)
		r.mu.Unlock()
		return nil
	})
}

func (r *recorder) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.violations)
}

// lastPoller returns the worker of the last poll of each session.
func (r *recorder) lastPoller() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.last))
	for k, v := range r.last {
		out[k] = v
	}
	return out
}

func (r *recorder) polled(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[id]
}

// token returns the greatest token session id was polled under (0 if
// never); reset keeps it.
func (r *recorder) token(id string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxToken[id]
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = map[string]string{}
	r.count = map[string]int{}
}

// fastConfig returns sub-second timings for tests. The discovery interval
// (the periodic full round) is long, so that the tests see the event-driven
// rounds do the work on their own.
func fastConfig(client redis.UniversalClient, id string, p Poller) Config {
	return Config{
		Client: client, ID: id, Poller: p,
		LeaseTTL: 900 * time.Millisecond, RenewInterval: 150 * time.Millisecond,
		HeartbeatInterval: 150 * time.Millisecond, DiscoveryInterval: 6 * time.Second, OrphanGrace: 400 * time.Millisecond,
		RequestTimeout: 100 * time.Millisecond, DrainTimeout: 2 * time.Second,
		// Placement tests must not depend on the machine's speed: on a
		// loaded machine under -race a worker can rightly judge itself
		// behind and shed load, which moves sessions between old members.
		// Shedding is tested where it is set (shed_test.go).
		KeepWeightWhenBehind: true,
	}
}

type running struct {
	c      *Coordinator
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned, after err is set
	err    error
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		require.NoError(t, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func start(t *testing.T, cfg Config) *running {
	t.Helper()
	c, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, cancel: cancel, done: make(chan struct{})}
	go func() { r.err = c.Run(ctx); close(r.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
		}
	})
	return r
}

func addSessions(t *testing.T, client redis.UniversalClient, n int, interval time.Duration) []string {
	t.Helper()
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	// Each test's Redis is new: no lease was granted in it before, so the
	// workers need not wait out the loss quarantine.
	_, err = lease.MarkFresh(context.Background(), client, keyspace.Space{})
	require.NoError(t, err)
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("session-%d", i)
		require.NoError(t, store.Put(context.Background(), session.Session{ID: ids[i], URL: "http://127.0.0.1:1/" + ids[i], Interval: session.Duration(interval)}))
	}
	return ids
}

// heldAsPlanned is a condition: each of ids is held by want[i].
func heldAsPlanned(t *testing.T, client redis.UniversalClient, ids, want []string) func() bool {
	return func() bool {
		own := owners(t, client, ids)
		for i, id := range ids {
			if own[id] != want[i] {
				return false
			}
		}
		return true
	}
}

// owners reads who holds each session's lease in Redis.
func owners(t *testing.T, client redis.UniversalClient, ids []string) map[string]string {
	t.Helper()
	hs, err := lease.Inspect(context.Background(), client, keyspace.Space{}, ids, 0)
	require.NoError(t, err)
	out := make(map[string]string, len(hs))
	for _, h := range hs {
		if h.Owner != "" {
			out[h.Session] = lease.HolderOf(h.Owner)
		}
	}
	return out
}

func TestConfigValidation(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	p := PollFunc(func(context.Context, *Turn) error { return nil })
	tests := []struct {
		name string
		give func(*Config)
		want string
	}{
		{"no client", func(c *Config) { c.Client = nil }, "Client is required"},
		{"no poller", func(c *Config) { c.Poller = nil }, "Poller is required"},
		{"ttl vs renew", func(c *Config) { c.LeaseTTL, c.RenewInterval = 20*time.Second, 10*time.Second }, "LeaseTTL (20s) must be at least 3 × RenewInterval (10s)"},
		{"negative", func(c *Config) { c.DiscoveryInterval = -time.Second }, "DiscoveryInterval (-1s) must be positive"},
		{"heartbeat ttl", func(c *Config) { c.HeartbeatTTL = 15 * time.Second }, "HeartbeatTTL"},
		{"request timeout", func(c *Config) { c.RequestTimeout = 10 * time.Second }, "RequestTimeout"},
		{"bad id", func(c *Config) { c.ID = "a*b" }, "ID"},
		{"bad prefix", func(c *Config) { c.Keys.Prefix = "a b" }, "key prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Client: client, Poller: p}
			tt.give(&cfg)
			_, err := New(cfg)
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tt.want)
			var ce *ConfigError
			require.ErrorAs(t, err, &ce, "every rule is a *ConfigError naming its field")
		})
	}
	c, err := New(Config{Client: client, Poller: p})
	require.NoError(t, err)
	require.NoError(t, keyspace.ValidateID(c.ID()))
	require.Equal(t, 30*time.Second, c.cfg.LeaseTTL)
}

// TestThreeWorkersConvergeAndHandOff and TestJoinMovesOnlyToNewcomer run
// alone (not in parallel): beside another test on a loaded 2-core machine
// they did not converge within their 10 s. Their deadlines (30 s to
// converge) bound a wait, not a speed: a fresh-clone make test missed 10 s.
func TestThreeWorkersConvergeAndHandOff(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 90, 50*time.Millisecond)
	rec := newRecorder()
	ws := map[string]*running{}
	for _, id := range []string{"w1", "w2", "w3"} {
		cfg := fastConfig(client, id, rec.poller(id))
		cfg.BalanceSlack = -1 // plain rendezvous: survivors keep every session
		ws[id] = start(t, cfg)
	}

	// Every session owned once, spread over the three, and polled. Settled:
	// each with its rendezvous owner (a split that merely adds up could
	// still be handing over, and a session between two holders reads as
	// nobody's in the snapshot below: seen under load).
	want := assign.Owners([]string{"w1", "w2", "w3"}, ids, -1)
	require.Eventually(t, func() bool {
		own := owners(t, client, ids)
		if len(own) != len(ids) {
			return false
		}
		for i, id := range ids {
			if own[id] != want[i] {
				return false
			}
		}
		per := map[string]int{}
		for _, w := range own {
			per[w]++
		}
		return len(per) == 3 && per["w1"] > 15 && per["w2"] > 15 && per["w3"] > 15
	}, 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if rec.polled(id) == 0 {
				return false
			}
		}
		return true
	}, 15*time.Second, 20*time.Millisecond)

	// Graceful stop of w2: its sessions are polled by the others soon after.
	before := owners(t, client, ids)
	ws["w2"].stop(t)
	rec.reset()
	require.Eventually(t, func() bool {
		last := rec.lastPoller()
		for _, id := range ids {
			if w, ok := last[id]; !ok || w == "w2" {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	after := owners(t, client, ids)
	for _, id := range ids {
		require.NotEqual(t, "w2", after[id])
		if before[id] != "w2" {
			require.Equal(t, before[id], after[id], "survivors keep their sessions")
		}
	}
	rec.check(t)
}

func TestJoinMovesOnlyToNewcomer(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 60, 50*time.Millisecond)
	rec := newRecorder()
	plain := func(id string) Config {
		cfg := fastConfig(client, id, rec.poller(id))
		cfg.BalanceSlack = -1 // plain rendezvous: only moves to the newcomer
		return cfg
	}
	start(t, plain("a"))
	start(t, plain("b"))
	// Settled: every session with its rendezvous owner among a and b (a
	// split that merely adds up could still be handing over).
	want := assign.Owners([]string{"a", "b"}, ids, -1)
	require.Eventually(t, heldAsPlanned(t, client, ids, want), 10*time.Second, 20*time.Millisecond)
	before := owners(t, client, ids)

	start(t, plain("c"))
	require.Eventually(t, func() bool {
		own := owners(t, client, ids)
		n := 0
		for _, w := range own {
			if w == "c" {
				n++
			}
		}
		return len(own) == len(ids) && n >= 10
	}, 10*time.Second, 20*time.Millisecond)
	for id, w := range owners(t, client, ids) {
		if w != "c" {
			require.Equal(t, before[id], w, "a session moved between old members")
		}
	}
	rec.check(t)
}

func TestFailClosedWhenRedisGoesAway(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	ids := addSessions(t, client, 10, 20*time.Millisecond)

	var mu sync.Mutex
	var late []string
	var polls int
	p := PollFunc(func(ctx context.Context, tn *Turn) error {
		s, l := tn.Session(), tn.lease
		mu.Lock()
		defer mu.Unlock()
		polls++
		if !time.Now().Before(l.Deadline()) {
			late = append(late, s.ID)
		}
		return nil
	})
	r := start(t, fastConfig(client, "solo", p))
	require.Eventually(t, func() bool { return len(owners(t, client, ids)) == len(ids) }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, r.c.Ready, 5*time.Second, 10*time.Millisecond)

	srv.Stop()
	stoppedAt := time.Now()
	// Within one renew interval (plus the request timeout) the worker is not
	// ready and holds nothing; no poll starts after a lease deadline.
	require.Eventually(t, func() bool { return !r.c.Ready() }, 2*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return len(r.c.Status().Owned) == 0 }, 2*time.Second, 5*time.Millisecond)
	mu.Lock()
	frozen := polls
	mu.Unlock()
	// The worker must stay quiet: wait until the lease TTL has certainly passed.
	require.Eventually(t, func() bool { return time.Since(stoppedAt) > 900*time.Millisecond && r.c.holdings.leases.Count() == 0 },
		5*time.Second, 10*time.Millisecond)
	mu.Lock()
	require.Equal(t, frozen, polls, "no poll while Redis is down")
	require.Empty(t, late)
	mu.Unlock()

	srv.Restart() // without persistence: the sessions must be registered again
	addSessions(t, client, 10, 20*time.Millisecond)
	require.Eventually(t, func() bool { return r.c.Ready() && len(r.c.Status().Owned) == len(ids) }, 10*time.Second, 20*time.Millisecond)
}

func TestPauseAndRemoveStopPolling(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 4, 20*time.Millisecond)
	rec := newRecorder()
	r := start(t, fastConfig(client, "w", rec.poller("w")))
	require.Eventually(t, func() bool { return len(r.c.Status().Owned) == 4 }, 10*time.Second, 10*time.Millisecond)
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	require.NoError(t, store.Pause(context.Background(), ids[0]))
	require.NoError(t, store.Delete(context.Background(), ids[1]))
	require.Eventually(t, func() bool { return len(r.c.Status().Owned) == 2 }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return len(owners(t, client, ids[:2])) == 0 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, store.Resume(context.Background(), ids[0]))
	require.Eventually(t, func() bool { return len(r.c.Status().Owned) == 3 }, 5*time.Second, 10*time.Millisecond)
	rec.check(t)
}

func TestPanickingPollDoesNotStopOthers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	addSessions(t, client, 3, 20*time.Millisecond)
	var mu sync.Mutex
	good := 0
	p := PollFunc(func(ctx context.Context, tn *Turn) error {
		s := tn.Session()
		if s.ID == "session-0" {
			panic("boom")
		}
		if s.ID == "session-1" {
			return errors.New("target down")
		}
		mu.Lock()
		good++
		mu.Unlock()
		return nil
	})
	r := start(t, fastConfig(client, "w", p))
	require.Eventually(t, func() bool {
		st := r.c.Status()
		mu.Lock()
		defer mu.Unlock()
		return st.PollPanics >= 3 && st.PollErrors >= 3 && good >= 3 && len(st.Owned) == 3
	}, 10*time.Second, 10*time.Millisecond)
}

func TestAdoptsOrphansOfALiveButIdleWorker(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 20, 50*time.Millisecond)

	ghost := startGhost(t, client) // heartbeats like a worker but never takes a lease
	require.Eventually(t, func() bool {
		m, err := ghost.Members(context.Background())
		return err == nil && m.Contains("ghost")
	}, 5*time.Second, 10*time.Millisecond)

	ghostShare := 0
	for _, o := range assign.Owners([]string{"ghost", "w"}, ids, DefaultBalanceSlack) {
		if o == "ghost" {
			ghostShare++
		}
	}
	require.Positive(t, ghostShare, "the test needs sessions the ghost is preferred for")

	rec := newRecorder()
	cfg := fastConfig(client, "w", rec.poller("w"))
	cfg.OrphanGrace = 400 * time.Millisecond
	// The orphan watch looks in rounds, and nothing announces an orphan:
	// the periodic round finds them, as in production.
	cfg.DiscoveryInterval = 300 * time.Millisecond
	r := start(t, cfg)
	// The ghost's share stays unowned for OrphanGrace, then w adopts it:
	// every session gets polled although the ghost is preferred for some.
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if rec.polled(id) == 0 {
				return false
			}
		}
		return true
	}, 15*time.Second, 20*time.Millisecond)
	require.True(t, r.c.Ready())
	rec.check(t)
}

func TestWarnsAboutEvictingPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy string
		risk   bool
	}{
		{"noeviction", false},
		{"volatile-lru", true},
		{"allkeys-lru", true},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, "--maxmemory-policy", tt.policy)
			client := srv.Client(t)
			addSessions(t, client, 1, 50*time.Millisecond)
			r := start(t, fastConfig(client, "w", newRecorder().poller("w")))
			require.Eventually(t, func() bool { return len(r.c.Status().Owned) == 1 }, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, tt.risk, r.c.Status().EvictionRisk)
		})
	}
}

func TestMalformedSessionsAreSkippedNotDeleted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 3, 20*time.Millisecond)
	ctx := context.Background()
	bad := map[string]func() error{
		"bad-json":   func() error { return client.Set(ctx, "session:bad-json", "{not json", 0).Err() },
		"no-url":     func() error { return client.Set(ctx, "session:no-url", `{"id":"no-url","interval":"1s"}`, 0).Err() },
		"wrong-type": func() error { return client.HSet(ctx, "session:wrong-type", "a", "b").Err() },
		"huge":       func() error { return client.Set(ctx, "session:huge", strings.Repeat("x", 1<<20), 0).Err() },
	}
	for id, put := range bad {
		require.NoError(t, put())
		require.NoError(t, client.SAdd(ctx, keyspace.Space{}.SessionBucketOf(id), id).Err())
	}
	rec := newRecorder()
	r := start(t, fastConfig(client, "w", rec.poller("w")))
	require.Eventually(t, func() bool {
		st := r.c.Status()
		return len(st.Owned) == len(ids) && st.Malformed == len(bad) && rec.polled(ids[0]) > 0
	}, 10*time.Second, 10*time.Millisecond)
	for id := range bad {
		require.Equal(t, int64(1), client.Exists(ctx, "session:"+id).Val(), "malformed %s must not be deleted", id)
	}
}

// TestMemoryPressureFailsClosed: with maxmemory-policy noeviction (the
// documented setup) a full Redis refuses writes that allocate (SET, INCR)
// but still runs renewals (PEXPIRE allocates nothing) and loses no key. So
// the leases a worker holds stay valid and exclusive, its heartbeat only
// renews and it reports not ready, and a worker that joins meanwhile
// acquires and polls nothing; once memory is available again the fleet
// rebalances. TestMemoryPressureKeepsEveryonePolling has several workers.
func TestMemoryPressureFailsClosed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	client := srv.Client(t)
	ids := addSessions(t, client, 6, 20*time.Millisecond)
	rec := newRecorder()
	w1 := start(t, fastConfig(client, "w1", rec.poller("w1")))
	require.Eventually(t, func() bool { return len(w1.c.Status().Owned) == len(ids) && w1.c.Ready() }, 10*time.Second, 10*time.Millisecond)
	require.False(t, w1.c.Status().EvictionRisk)
	before := owners(t, client, ids)

	// Redis is now over its memory limit: every allocating write gets OOM.
	ctx := context.Background()
	require.NoError(t, client.ConfigSet(ctx, "maxmemory", "1").Err())
	require.ErrorContains(t, client.Set(ctx, "probe", "x", 0).Err(), "OOM")
	require.Eventually(t, func() bool { return !w1.c.Ready() }, 10*time.Second, 10*time.Millisecond, "heartbeats fail: not ready")

	w2 := start(t, fastConfig(client, "w2", rec.poller("w2")))
	waitUntil := time.Now().Add(time.Second) // > TTL (900ms): any lease would have moved by now
	require.Eventually(t, func() bool { return time.Now().After(waitUntil) }, 5*time.Second, 20*time.Millisecond)
	require.False(t, w2.c.Ready())
	require.Empty(t, w2.c.Status().Owned, "no lease can be taken while Redis is full")
	require.Equal(t, before, owners(t, client, ids), "no lease lost or moved under memory pressure")
	for _, w := range rec.lastPoller() {
		require.Equal(t, "w1", w, "only the holder polls")
	}

	require.NoError(t, client.ConfigSet(ctx, "maxmemory", "0").Err())
	require.Eventually(t, func() bool {
		return w1.c.Ready() && w2.c.Ready() && len(w2.c.Status().Owned) > 0 && len(w1.c.Status().Owned)+len(w2.c.Status().Owned) == len(ids)
	}, 10*time.Second, 10*time.Millisecond)
	rec.check(t)
}
