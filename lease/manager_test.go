package lease

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pollworker/pollworker/keyspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	mr    *miniredis.Miniredis
	rdb   *redis.Client
	clock *clocktesting.FakeClock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return &fixture{mr: mr, rdb: rdb, clock: clocktesting.NewFakeClock(time.Unix(1000, 0))}
}

func (f *fixture) manager(t *testing.T, holder string, opts ...func(*Config)) *Manager {
	t.Helper()
	// LossQuarantine off: a fresh miniredis looks like a data loss, and
	// the quarantine has tests of its own (quarantine_test.go).
	cfg := Config{Client: f.rdb, Holder: holder, TTL: 3 * time.Second, Clock: f.clock, LossQuarantine: -1}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := New(cfg)
	require.NoError(t, err)
	return m
}

func acquireOne(t *testing.T, m *Manager, s string) Result {
	t.Helper()
	r := m.Acquire(context.Background(), []string{s})
	require.Len(t, r, 1)
	return r[0]
}

func TestConfigValidation(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name string
		give Config
		want string
	}{
		{"no client", Config{Holder: "w"}, "Client is required"},
		{"bad holder", Config{Client: f.rdb, Holder: "a b"}, "Holder"},
		{"tiny ttl", Config{Client: f.rdb, Holder: "w", TTL: time.Millisecond}, "TTL must be at least"},
		{"margin too big", Config{Client: f.rdb, Holder: "w", TTL: time.Second, DriftMargin: time.Second}, "DriftMargin"},
		{"bad batch", Config{Client: f.rdb, Holder: "w", BatchSize: -1}, "BatchSize"},
		{"negative renew age", Config{Client: f.rdb, Holder: "w", MinRenewAge: -time.Second}, "MinRenewAge"},
		{"renew age of half the TTL", Config{Client: f.rdb, Holder: "w", TTL: 2 * time.Second, MinRenewAge: time.Second}, "MinRenewAge"},
		{"bad prefix", Config{Client: f.rdb, Holder: "w", Keys: keyspace.Space{Prefix: "a*"}}, "key prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.give)
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestAcquireExclusiveWithIncreasingTokens(t *testing.T) {
	f := newFixture(t)
	a, b := f.manager(t, "a"), f.manager(t, "b")
	ctx := context.Background()

	ra := acquireOne(t, a, "s1")
	require.NoError(t, ra.Err)
	require.NotNil(t, ra.Lease)
	require.Positive(t, ra.Lease.Token())
	require.Equal(t, Held, ra.Lease.State())
	require.Equal(t, "a", HolderOf(ra.Lease.Owner()))

	rb := acquireOne(t, b, "s1")
	require.NoError(t, rb.Err)
	require.Nil(t, rb.Lease)
	require.Equal(t, 3*time.Second, rb.Remaining)
	require.Equal(t, "a", rb.Holder, "the holder is named, so b can retry on its release")

	// Acquiring again what we hold returns the same lease.
	require.Same(t, ra.Lease, acquireOne(t, a, "s1").Lease)

	require.NoError(t, a.Release(ctx, ra.Lease))
	require.Equal(t, Released, ra.Lease.State())
	require.Error(t, ra.Lease.Context().Err())
	require.False(t, f.mr.Exists("poll:lease:{s1}"))

	first := ra.Lease.Token()
	rb = acquireOne(t, b, "s1")
	require.NotNil(t, rb.Lease)
	require.Greater(t, rb.Lease.Token(), first)

	// Expiry in Redis, then another holder: token goes on increasing.
	f.mr.FastForward(4 * time.Second)
	ra = acquireOne(t, a, "s1")
	require.NotNil(t, ra.Lease)
	require.Greater(t, ra.Lease.Token(), rb.Lease.Token())
}

func TestDeadlineCountsFromSendTimeMinusDrift(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a", func(c *Config) { c.TTL = 10 * time.Second })
	sent := f.clock.Now()
	l := acquireOne(t, m, "s").Lease
	require.NotNil(t, l)
	want := sent.Add(10*time.Second - (100*time.Millisecond + 2*time.Millisecond))
	require.Equal(t, want, l.Deadline())
}

func TestLeaseLostAtLocalDeadline(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var events []string
	m := f.manager(t, "a", func(c *Config) {
		c.OnChange = func(l *Lease, from, to State) {
			mu.Lock()
			events = append(events, fmt.Sprintf("%s:%v->%v", l.Session(), from, to))
			mu.Unlock()
		}
	})
	l := acquireOne(t, m, "s").Lease
	ctx := l.Context()
	f.clock.Step(l.Deadline().Sub(f.clock.Now()) - time.Millisecond)
	require.Equal(t, Held, l.State())
	require.NoError(t, ctx.Err())
	f.clock.Step(time.Millisecond)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) == 2
	}, time.Second, time.Millisecond)
	require.Equal(t, Lost, l.State())
	require.Error(t, ctx.Err())
	require.Equal(t, "deadline passed", l.Reason())
	require.Nil(t, m.Get("s"))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"s:unknown->held", "s:held->lost"}, events)
}

func TestRenewExtendsDeadlineAndTTL(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a")
	l := acquireOne(t, m, "s").Lease
	first := l.Deadline()
	f.clock.Step(time.Second)
	f.mr.FastForward(time.Second)
	rep := m.RenewAll(context.Background())
	require.NoError(t, rep.Err)
	require.Equal(t, 1, rep.Renewed)
	require.Equal(t, first.Add(time.Second), l.Deadline())
	require.Equal(t, 3*time.Second, f.mr.TTL("poll:lease:{s}"))
	// The old deadline passes: the timer was moved, the lease stays held.
	f.clock.Step(first.Sub(f.clock.Now()))
	require.Equal(t, Held, l.State())
}

// TestRenewSkipsYoungHeldLeases: with MinRenewAge, a Held lease whose last
// request was sent less than MinRenewAge ago is counted and left alone,
// unless every lease is that young; from that age on it is renewed as
// before; and when the cycle fails, the young leases turn Uncertain with
// the others, and are renewed at the next cycle.
func TestRenewSkipsYoungHeldLeases(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	step := func(d time.Duration) { f.clock.Step(d); f.mr.FastForward(d) }
	m := f.manager(t, "a", func(c *Config) { c.MinRenewAge = time.Second }) // TTL 3 s
	old := acquireOne(t, m, "old").Lease
	step(600 * time.Millisecond)
	young := acquireOne(t, m, "young").Lease
	step(400 * time.Millisecond) // old: exactly MinRenewAge; young: 400 ms

	first := young.Deadline()
	rep := m.RenewAll(ctx)
	require.NoError(t, rep.Err)
	require.Equal(t, 1, rep.Renewed)
	require.Equal(t, 1, rep.Young)
	require.Equal(t, first, young.Deadline(), "a young lease keeps its deadline")
	require.Equal(t, 3*time.Second-400*time.Millisecond, f.mr.TTL("poll:lease:{young}"), "nor is its key touched")
	require.Equal(t, 3*time.Second, f.mr.TTL("poll:lease:{old}"))

	// Both younger than MinRenewAge now: a cycle that would send nothing
	// renews them all, so that it still asks Redis.
	step(100 * time.Millisecond)
	rep = m.RenewAll(ctx)
	require.NoError(t, rep.Err)
	require.Equal(t, 2, rep.Renewed)
	require.Zero(t, rep.Young)
	require.Equal(t, first.Add(500*time.Millisecond), young.Deadline())

	// A cycle with old and young due and a new lease, young, fails: all
	// three stop, the young one too.
	step(time.Second)
	third := acquireOne(t, m, "third").Lease
	f.mr.Close()
	rep = m.RenewAll(ctx)
	require.Error(t, rep.Err)
	require.Equal(t, 1, rep.Young)
	require.ElementsMatch(t, []*Lease{old, young, third}, rep.Uncertain)
	for _, l := range []*Lease{old, young, third} {
		require.Equal(t, Uncertain, l.State(), l.Session())
		require.Error(t, l.Context().Err(), "the poll under %s is cancelled", l.Session())
	}

	// Redis back: the next cycle renews every Uncertain lease, young or not.
	require.NoError(t, f.mr.Restart())
	rep = m.RenewAll(ctx)
	require.NoError(t, rep.Err)
	require.Equal(t, 3, rep.Renewed)
	require.Zero(t, rep.Young)
	for _, l := range []*Lease{old, young, third} {
		require.Equal(t, Held, l.State(), l.Session())
	}
}

func TestRenewNeverRecreatesOrStealsKey(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fixture)
	}{
		{"key deleted", func(f *fixture) { f.mr.Del("poll:lease:{s}") }},
		{"key expired", func(f *fixture) { f.mr.FastForward(4 * time.Second) }},
		{"another owner", func(f *fixture) {
			f.mr.Del("poll:lease:{s}")
			require.NoError(t, f.mr.Set("poll:lease:{s}", "b#0000000000000000"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			m := f.manager(t, "a")
			l := acquireOne(t, m, "s").Lease
			before, _ := f.mr.Get("poll:lease:{s}")
			tt.setup(f)
			after, _ := f.mr.Get("poll:lease:{s}")
			rep := m.RenewAll(context.Background())
			require.Equal(t, []*Lease{l}, rep.Lost)
			require.Equal(t, Lost, l.State())
			require.Error(t, l.Context().Err())
			now, _ := f.mr.Get("poll:lease:{s}")
			require.Equal(t, after, now, "renew must not touch the key")
			require.NotEqual(t, before, "")
			require.Nil(t, m.Get("s"))
		})
	}
}

func TestReleaseOnlyOwnLease(t *testing.T) {
	f := newFixture(t)
	a := f.manager(t, "a")
	l := acquireOne(t, a, "s").Lease
	f.mr.Del("poll:lease:{s}")
	require.NoError(t, f.mr.Set("poll:lease:{s}", "b#1"))
	require.NoError(t, a.Release(context.Background(), l))
	v, err := f.mr.Get("poll:lease:{s}")
	require.NoError(t, err)
	require.Equal(t, "b#1", v)
}

func TestRenewErrorMakesUncertainThenRecovers(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a")
	l := acquireOne(t, m, "s").Lease
	held, token := l.Context(), l.Token()

	f.mr.SetError("LOADING server is busy")
	rep := m.RenewAll(context.Background())
	require.Error(t, rep.Err)
	require.Equal(t, []*Lease{l}, rep.Uncertain)
	require.Equal(t, Uncertain, l.State())
	require.Error(t, held.Err(), "polling must stop at once")
	require.Error(t, l.Context().Err())

	f.mr.SetError("")
	f.clock.Step(time.Second)
	rep = m.RenewAll(context.Background())
	require.NoError(t, rep.Err)
	require.Equal(t, Held, l.State())
	require.NoError(t, l.Context().Err(), "a new term begins")
	require.Equal(t, token, l.Token(), "the same acquisition")
}

func TestUncertainBecomesLostAtDeadline(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a")
	l := acquireOne(t, m, "s").Lease
	f.mr.SetError("ERR down")
	m.RenewAll(context.Background())
	require.Equal(t, Uncertain, l.State())
	f.clock.Step(3 * time.Second)
	require.Eventually(t, func() bool { return l.State() == Lost }, time.Second, time.Millisecond)
}

func TestAcquireErrorIsNotOwnershipAndRetryIsIdempotent(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a")
	f.mr.SetError("ERR down")
	r := acquireOne(t, m, "s")
	require.Error(t, r.Err)
	require.Nil(t, r.Lease)
	require.Zero(t, m.Count())

	// Simulate a request that applied in Redis although its reply was lost:
	// the key holds the pending owner value.
	f.mr.SetError("")
	m.mu.Lock()
	owner := m.pending["s"]
	m.mu.Unlock()
	require.NotEmpty(t, owner)
	require.NoError(t, f.mr.Set("poll:lease:{s}", owner))
	f.mr.HSet("poll:fencing:{s}", "token", "7")

	r = acquireOne(t, m, "s")
	require.NoError(t, r.Err)
	require.NotNil(t, r.Lease)
	require.Equal(t, int64(7), r.Lease.Token())
	require.Equal(t, owner, r.Lease.Owner())
}

func TestAcquireRejectsInvalidIDs(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a")
	r := acquireOne(t, m, "bad*id")
	require.ErrorIs(t, r.Err, keyspace.ErrInvalidID)
	require.Empty(t, f.mr.Keys())
}

func TestBatchesManySessions(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a", func(c *Config) { c.BatchSize = 7 })
	var ids []string
	for i := range 100 {
		ids = append(ids, fmt.Sprintf("s%03d", i))
	}
	for _, r := range m.Acquire(context.Background(), ids) {
		require.NoError(t, r.Err)
		require.NotNil(t, r.Lease, r.Session)
	}
	require.Equal(t, 100, m.Count())
	rep := m.RenewAll(context.Background())
	require.Equal(t, 100, rep.Renewed)
	require.NoError(t, m.ReleaseAll(context.Background()))
	require.Zero(t, m.Count())
	for _, id := range ids {
		require.False(t, f.mr.Exists("poll:lease:{"+id+"}"))
		require.True(t, f.mr.Exists("poll:fencing:{"+id+"}"))
	}
}

func TestBatchBySlotGroupsClusterSlots(t *testing.T) {
	var ids []string
	idx := []int{}
	for i := range 200 {
		ids = append(ids, fmt.Sprintf("s%d", i))
		idx = append(idx, i)
	}
	keys := keyspace.Space{}
	got := batchBySlot(idx, ids, 3, true, keys)
	seen := 0
	for _, b := range got {
		require.LessOrEqual(t, len(b), 3)
		slot := keyspace.Slot(keys.Lease(ids[b[0]]))
		for _, i := range b {
			require.Equal(t, slot, keyspace.Slot(keys.Fencing(ids[i])))
			require.Equal(t, slot, keyspace.Slot(keys.Lease(ids[i])))
		}
		seen += len(b)
	}
	require.Equal(t, 200, seen)
	require.Len(t, batchBySlot(idx, ids, 50, false, keys), 4)
}

func TestInspect(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a")
	l := acquireOne(t, m, "s1").Lease
	hs, err := m.Inspect(context.Background(), []string{"s1", "s2"})
	require.NoError(t, err)
	require.Equal(t, l.Owner(), hs[0].Owner)
	require.Equal(t, 3*time.Second, hs[0].Remaining)
	require.Equal(t, Holding{Session: "s2"}, hs[1])
}

func TestUnheld(t *testing.T) {
	f := newFixture(t)
	a, b := f.manager(t, "a", func(c *Config) { c.BatchSize = 2 }), f.manager(t, "b")
	acquireOne(t, a, "mine")
	acquireOne(t, b, "theirs")
	acquireOne(t, a, "expired")
	f.mr.Del(realKeys.Lease("expired")) // as if its TTL ran out in Redis
	tests := []struct {
		name string
		give []string
		want []string
	}{
		{"none", nil, nil},
		{"all held", []string{"mine", "theirs"}, nil},
		{"free ones in order across batches", []string{"free1", "mine", "expired", "theirs", "free2"}, []string{"free1", "expired", "free2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := a.Unheld(context.Background(), tt.give)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	f.mr.SetError("LOADING simulated")
	_, err := a.Unheld(context.Background(), []string{"mine"})
	require.Error(t, err, "a Redis error is never read as free or held")
}

// TestAfterTermRunsWhenTheHeldTermEnds: a function registered with
// AfterTerm runs as the term ends (a renewal error making the lease
// Uncertain), not for the next term; stop unregisters one before it runs;
// a lease not Held registers nothing. The term's context is made only
// when asked for, cancelled all the same.
func TestAfterTermRunsWhenTheHeldTermEnds(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a")
	l := acquireOne(t, m, "s").Lease
	require.Nil(t, l.term, "no context made before one is asked for")

	var ran, stoppedRan []int
	stop1, ok := l.AfterTerm(func() { ran = append(ran, 1) })
	require.True(t, ok)
	stop2, ok := l.AfterTerm(func() { stoppedRan = append(stoppedRan, 2) })
	require.True(t, ok)
	require.True(t, stop2(), "unregistered before the term ended")
	require.False(t, stop2(), "only once")

	f.mr.SetError("LOADING server is busy")
	require.Error(t, m.RenewAll(context.Background()).Err)
	require.Equal(t, Uncertain, l.State())
	require.Equal(t, []int{1}, ran)
	require.Empty(t, stoppedRan)
	require.False(t, stop1(), "it ran")
	require.Error(t, l.Context().Err(), "a context asked for after the term is cancelled")

	_, ok = l.AfterTerm(func() { t.Fatal("registered while Uncertain") })
	require.False(t, ok)

	f.mr.SetError("")
	f.clock.Step(time.Second)
	require.NoError(t, m.RenewAll(context.Background()).Err)
	require.Equal(t, Held, l.State())
	require.Equal(t, []int{1}, ran, "the next term runs nothing of the last")
	_, ok = l.AfterTerm(func() { ran = append(ran, 3) })
	require.True(t, ok)
	held := l.Context()
	require.NoError(t, held.Err())
	require.NoError(t, m.Release(context.Background(), l))
	require.Equal(t, []int{1, 3}, ran)
	require.Error(t, held.Err())
}

// TestNotHeld: on a fenced write's proof that the key is gone, a Held or
// Uncertain lease is Lost at once (its context cancelled, forgotten, the
// change told); a lease already ended is left as it is.
func TestNotHeld(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	var changes []string
	m := f.manager(t, "a", func(c *Config) {
		c.OnChange = func(l *Lease, from, to State) {
			changes = append(changes, l.Session()+":"+from.String()+">"+to.String())
		}
	})
	held := acquireOne(t, m, "held").Lease
	uncertain := acquireOne(t, m, "uncertain").Lease
	released := acquireOne(t, m, "released").Lease
	require.NoError(t, m.Release(ctx, released))
	_, ok := m.transition(uncertain, Uncertain, "test")
	require.True(t, ok)
	changes = nil

	for _, l := range []*Lease{held, uncertain} {
		require.True(t, m.NotHeld(ctx, l, "key gone"), l.Session())
		require.Equal(t, Lost, l.State())
		require.Equal(t, "key gone", l.Reason())
		require.Error(t, l.Context().Err())
		require.Nil(t, m.Get(l.Session()), "forgotten")
	}
	require.False(t, m.NotHeld(ctx, held, "again"), "once")
	require.False(t, m.NotHeld(ctx, released, "key gone"))
	require.Equal(t, Released, released.State())
	require.Equal(t, []string{"held:held>lost", "uncertain:uncertain>lost"}, changes)
	require.Zero(t, m.Count())
}
