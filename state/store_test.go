package state_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/state"
)

var keys = keyspace.Space{}

// managerOn returns a lease manager for holder on client: a fake clock (the
// Redis TTL still runs in real time), no loss quarantine.
func managerOn(t *testing.T, client lease.Client, holder string, ttl time.Duration) *lease.Manager {
	t.Helper()
	m, err := lease.New(lease.Config{Client: client, Holder: holder, TTL: ttl,
		Clock: clocktesting.NewFakeClock(time.Unix(1000, 0)), LossQuarantine: -1})
	require.NoError(t, err)
	return m
}

// acquire takes session's lease with m, which must succeed.
func acquire(t *testing.T, m *lease.Manager, session string) *lease.Lease {
	t.Helper()
	r := m.Acquire(context.Background(), []string{session})
	require.NoError(t, r[0].Err)
	require.NotNil(t, r[0].Lease, "lease of %s not acquired (held by %q)", session, r[0].Holder)
	return r[0].Lease
}

func TestSaveAndLoad(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	clk := clocktesting.NewFakeClock(time.Unix(5000, 0))
	st := state.NewStore(rdb, keys, state.WithClock(clk))
	m := managerOn(t, rdb, "w1", 10*time.Second)

	never, err := st.Load(ctx, "s1")
	require.NoError(t, err)
	require.Nil(t, never.Data)
	require.Zero(t, never.Token)
	require.True(t, never.Saved.IsZero())
	_, ok := never.SincePolled()
	require.False(t, ok)

	l := acquire(t, m, "s1")
	polled := clk.Now()
	clk.Step(1500 * time.Millisecond) // the poll took 1.5s before it saved
	rec, err := st.Save(ctx, l, polled, []byte("cursor-1"))
	require.NoError(t, err)
	require.Equal(t, []byte("cursor-1"), rec.Data)
	require.Equal(t, l.Token(), rec.Token)
	require.WithinDuration(t, time.Now(), rec.Saved, 2*time.Second)
	require.Equal(t, 1500*time.Millisecond, rec.Saved.Sub(rec.PolledAt), "PolledAt is on the server's clock, 1.5s before the save")

	got, err := st.Load(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, rec.Data, got.Data)
	require.Equal(t, rec.Token, got.Token)
	require.Equal(t, rec.Saved, got.Saved)
	require.Equal(t, rec.PolledAt, got.PolledAt)
	since, ok := got.SincePolled()
	require.True(t, ok)
	require.GreaterOrEqual(t, since, 1500*time.Millisecond)
	require.Less(t, since, 3*time.Second)

	// The state key has no TTL and shares the lease's slot.
	require.Equal(t, time.Duration(-1), rdb.PTTL(ctx, keys.State("s1")).Val())
	require.Equal(t, keyspace.Slot(keys.Lease("s1")), keyspace.Slot(keys.State("s1")))

	// A save without a poll start stores none; empty data is not "never".
	rec, err = st.Save(ctx, l, time.Time{}, nil)
	require.NoError(t, err)
	got, err = st.Load(ctx, "s1")
	require.NoError(t, err)
	require.NotNil(t, got.Data)
	require.Empty(t, got.Data)
	require.True(t, got.PolledAt.IsZero())
	require.Equal(t, rec.Token, got.Token)
}

func TestSaveRefusedForAStaleLease(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	st := state.NewStore(rdb, keys)
	a := managerOn(t, rdb, "a", 10*time.Second)
	b := managerOn(t, rdb, "b", 10*time.Second)

	t.Run("released", func(t *testing.T) {
		l := acquire(t, a, "rel")
		_, err := st.Save(ctx, l, time.Time{}, []byte("a1"))
		require.NoError(t, err)
		require.NoError(t, a.Release(ctx, l))
		_, err = st.Save(ctx, l, time.Time{}, []byte("a2"))
		require.ErrorIs(t, err, state.ErrStale)
		got, err := st.Load(ctx, "rel")
		require.NoError(t, err)
		require.Equal(t, "a1", string(got.Data))
	})

	t.Run("expired and taken by another", func(t *testing.T) {
		la := acquire(t, a, "exp")
		_, err := st.Save(ctx, la, time.Time{}, []byte("a1"))
		require.NoError(t, err)
		// A's lease ends in Redis as a TTL would end it; A does not know.
		require.NoError(t, rdb.Del(ctx, keys.Lease("exp")).Err())
		_, err = st.Save(ctx, la, time.Time{}, []byte("a-while-free"))
		require.ErrorIs(t, err, state.ErrStale, "a missing lease key refuses the save")
		require.ErrorIs(t, err, state.ErrNotHeld, "and proves the lease lost")
		lb := acquire(t, b, "exp")
		require.Greater(t, lb.Token(), la.Token())
		prev, err := st.Load(ctx, "exp")
		require.NoError(t, err)
		require.Equal(t, "a1", string(prev.Data), "the successor reads the last save of its predecessor")
		_, err = st.Save(ctx, lb, time.Time{}, []byte("b1"))
		require.NoError(t, err)
		_, err = st.Save(ctx, la, time.Time{}, []byte("a2"))
		require.ErrorIs(t, err, state.ErrStale)
		got, err := st.Load(ctx, "exp")
		require.NoError(t, err)
		require.Equal(t, "b1", string(got.Data))
		require.Equal(t, lb.Token(), got.Token)
	})

	t.Run("lower token", func(t *testing.T) {
		l := acquire(t, a, "tok")
		_, err := st.Save(ctx, l, time.Time{}, []byte("a1"))
		require.NoError(t, err)
		// The stored state says a newer token wrote it (a lease whose key
		// survived a loss of the state's writes cannot pass either).
		newer := fmt.Sprint(l.Token() + 1)
		require.NoError(t, rdb.HSet(ctx, keys.State("tok"), "token", newer).Err())
		_, err = st.Save(ctx, l, time.Time{}, []byte("a2"))
		require.ErrorIs(t, err, state.ErrStale)
		require.NotErrorIs(t, err, state.ErrNotHeld, "the lease key is still its own")
		require.ErrorContains(t, err, newer)
		got, err := st.Load(ctx, "tok")
		require.NoError(t, err)
		require.Equal(t, "a1", string(got.Data))
		require.Equal(t, newer, fmt.Sprint(got.Token))
	})
}

// TestStaleHolderCannotOverwriteSuccessor: holder A stops renewing (a
// pause), its lease runs out in Redis, B takes the session and saves; A,
// resuming, still has its lease object and tries to save: refused, B's state
// intact.
func TestStaleHolderCannotOverwriteSuccessor(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	st := state.NewStore(rdb, keys)
	const ttl = 200 * time.Millisecond
	a := managerOn(t, rdb, "a", ttl)
	b := managerOn(t, rdb, "b", ttl)
	la := acquire(t, a, "s")
	_, err := st.Save(ctx, la, time.Time{}, []byte("from-a"))
	require.NoError(t, err)

	// A is paused: it renews nothing. Wait for Redis to expire its lease.
	require.Eventually(t, func() bool { return rdb.Exists(ctx, keys.Lease("s")).Val() == 0 },
		5*time.Second, 5*time.Millisecond)
	lb := acquire(t, b, "s")
	seen, err := st.Load(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, "from-a", string(seen.Data))
	_, err = st.Save(ctx, lb, time.Time{}, []byte("from-b"))
	require.NoError(t, err)

	// A resumes and saves as if it still held the session.
	_, err = st.Save(ctx, la, time.Time{}, []byte("late-from-a"))
	require.ErrorIs(t, err, state.ErrStale)
	got, err := st.Load(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, "from-b", string(got.Data))
	require.Equal(t, lb.Token(), got.Token)
}

func TestSaveTooLarge(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	st := state.NewStore(rdb, keys, state.WithMaxSize(1000))
	require.Equal(t, 1000, st.MaxSize())
	require.Equal(t, state.DefaultMaxSize, state.NewStore(rdb, keys).MaxSize())
	l := acquire(t, managerOn(t, rdb, "w", 10*time.Second), "big")
	_, err := st.Save(ctx, l, time.Time{}, bytes.Repeat([]byte("x"), 1000)) // at the limit: accepted
	require.NoError(t, err)
	before, err := st.Load(ctx, "big")
	require.NoError(t, err)

	_, err = st.Save(ctx, l, time.Time{}, bytes.Repeat([]byte("y"), 1001))
	require.ErrorIs(t, err, state.ErrTooLarge)
	require.False(t, errors.Is(err, state.ErrStale))
	after, err := st.Load(ctx, "big")
	require.NoError(t, err)
	require.Equal(t, before.Data, after.Data, "nothing lost")
	require.Equal(t, before.Saved, after.Saved, "nothing written")
}

// TestRedisErrorsAreNotSuccess: a save or load that cannot reach Redis
// returns an error that is neither success nor ErrStale.
func TestRedisErrorsAreNotSuccess(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := redistest.NewClient(t, srv.Addr())
	st := state.NewStore(rdb, keys)
	l := acquire(t, managerOn(t, rdb, "w", 10*time.Second), "s")
	srv.Stop()
	_, err := st.Save(ctx, l, time.Time{}, []byte("x"))
	require.Error(t, err)
	require.False(t, errors.Is(err, state.ErrStale))
	_, err = st.LoadMany(ctx, []string{"s", "t"})
	require.Error(t, err)
}

func TestLoadManyAndScriptFlush(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	st := state.NewStore(rdb, keys)
	m := managerOn(t, rdb, "w", 10*time.Second)
	var ids []string
	for i := range 1200 { // more than one script call
		id := fmt.Sprintf("s%04d", i)
		ids = append(ids, id)
		if i%3 == 0 {
			_, err := st.Save(ctx, acquire(t, m, id), time.Time{}, []byte("v"+id))
			require.NoError(t, err)
		}
	}
	require.NoError(t, rdb.ScriptFlush(ctx).Err()) // LoadMany loads the script again
	recs, err := st.LoadMany(ctx, ids)
	require.NoError(t, err)
	require.Len(t, recs, len(ids))
	for i, id := range ids {
		if i%3 == 0 {
			require.Equal(t, "v"+id, string(recs[id].Data), id)
			require.Equal(t, m.Get(id).Token(), recs[id].Token, id)
		} else {
			require.Nil(t, recs[id].Data, id)
			require.Zero(t, recs[id].Token, id)
		}
	}
	_, err = st.LoadMany(ctx, []string{"ok", "not ok"})
	require.ErrorIs(t, err, keyspace.ErrInvalidID)

	require.NoError(t, st.Delete(ctx, "s0000"))
	gone, err := st.Load(ctx, "s0000")
	require.NoError(t, err)
	require.Zero(t, gone.Token)
}

// TestCluster: under Redis Cluster the state key is in its lease's slot
// (the fenced save reads both in one script) and LoadMany reads sessions
// of every slot in one pipeline.
func TestCluster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3).Client(t)
	st := state.NewStore(cl, keys)
	m := managerOn(t, cl, "w", 10*time.Second)
	var ids []string
	slots := map[uint16]bool{}
	for i := range 60 {
		id := fmt.Sprintf("c%d", i)
		ids = append(ids, id)
		require.Equal(t, keyspace.Slot(keys.Lease(id)), keyspace.Slot(keys.State(id)))
		slots[keyspace.Slot(keys.State(id))] = true
		_, err := st.Save(ctx, acquire(t, m, id), time.Time{}, []byte(id))
		require.NoError(t, err)
	}
	require.Greater(t, len(slots), 30, "sessions spread over many slots")
	recs, err := st.LoadMany(ctx, append(ids, "never"))
	require.NoError(t, err)
	for _, id := range ids {
		require.Equal(t, id, string(recs[id].Data))
	}
	require.Zero(t, recs["never"].Token)

	// A stale holder is refused in Cluster too.
	l := m.Get("c1")
	require.NoError(t, m.Release(ctx, l))
	_, err = st.Save(ctx, l, time.Time{}, []byte("late"))
	require.ErrorIs(t, err, state.ErrStale)
	var rerr redis.Error
	require.False(t, errors.As(err, &rerr))
}

// TestCompactKeepsARecord: the compact form a worker keeps gives back the
// very Record the Store returned, zero times included.
func TestCompactKeepsARecord(t *testing.T) {
	ms := time.UnixMilli(1_795_507_625_501)
	for _, tc := range []struct {
		name string
		give state.Record
	}{
		{"never saved", state.Record{}},
		{"loaded", state.Record{Data: []byte(`{"v":1}`), Token: 7, Saved: ms, PolledAt: ms.Add(-2 * time.Millisecond), Read: ms.Add(time.Second)}},
		{"saved without a poll start", state.Record{Data: []byte("x"), Token: 1 << 60, Saved: ms, Read: ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.give.Compact()
			require.Equal(t, tc.give, c.Record())
			require.Equal(t, tc.give.Token, c.Token())
		})
	}
}
