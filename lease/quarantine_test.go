package lease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

func withQuarantine(q time.Duration) func(*Config) { return func(c *Config) { c.LossQuarantine = q } }

// TestRealQuarantineAfterDataLoss: after Redis loses its data (here
// FLUSHALL), nobody takes a free lease for LossQuarantine, so the holder
// from before the loss finds its lease gone (and stops) before a successor
// starts; the successor's token is still above the lost one.
func TestRealQuarantineAfterDataLoss(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	const ttl = 400 * time.Millisecond
	a := r.manager(t, "a", useRealClock, withTTL(ttl), withQuarantine(-1))
	b := r.manager(t, "b", useRealClock, withTTL(ttl), withQuarantine(ttl))

	old := acquireOne(t, a, "s").Lease
	require.NotNil(t, old)
	require.NoError(t, r.rdb.FlushAll(ctx).Err())

	lost := time.Now()
	res := acquireOne(t, b, "s")
	require.NoError(t, res.Err)
	require.Nil(t, res.Lease, "quarantined: the old holder may still poll")
	require.True(t, res.Quarantined)
	require.Greater(t, res.Remaining, ttl-100*time.Millisecond)
	require.LessOrEqual(t, res.Remaining, ttl)

	rep := a.RenewAll(ctx)
	require.Equal(t, []*Lease{old}, rep.Lost, "the old holder learns at its next renewal")

	var l *Lease
	require.Eventually(t, func() bool { l = acquireOne(t, b, "s").Lease; return l != nil }, 3*time.Second, 10*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(lost), ttl-50*time.Millisecond, "not before the quarantine ended")
	require.Greater(t, l.Token(), old.Token(), "tokens never go back, even with the counter lost")
	require.NoError(t, b.ReleaseAll(ctx))
}

// TestRealQuarantineAfterRestart: a restart (a new server run id) counts
// as a loss even with persistence, since the last writes may be missing;
// a lease that survived it is still renewed by its holder.
func TestRealQuarantineAfterRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	r := &realEnv{srv: srv, rdb: srv.Client(t), counted: srv.Client(t), hook: &scriptHook{}}
	ctx := context.Background()
	const ttl = 2 * time.Second
	a := r.manager(t, "a", useRealClock, withTTL(ttl), withQuarantine(ttl))
	b := r.manager(t, "b", useRealClock, withTTL(ttl), withQuarantine(ttl))
	require.Eventually(t, func() bool { return acquireOne(t, a, "kept").Lease != nil }, 5*time.Second, 20*time.Millisecond,
		"a fresh keyspace is quarantined once")
	kept := a.Get("kept")

	srv.Restart()
	require.Eventually(t, func() bool { return r.rdb.Ping(ctx).Err() == nil }, 5*time.Second, 10*time.Millisecond)
	res := acquireOne(t, b, "free")
	require.NoError(t, res.Err)
	require.True(t, res.Quarantined, "a new run id: the last writes may be lost")
	rep := a.RenewAll(ctx)
	require.NoError(t, rep.Err)
	require.Equal(t, Held, kept.State(), "a lease that survived is renewed as usual")
	require.Equal(t, kept.Owner(), r.owner(t, "kept"))
}

// TestRealQuarantineOff: with LossQuarantine negative a loss is recorded
// but nothing waits.
func TestRealQuarantineOff(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	m := r.manager(t, "a", withQuarantine(-1))
	res := acquireOne(t, m, "s")
	require.NotNil(t, res.Lease)
	require.False(t, res.Quarantined)
	v, err := r.rdb.Get(context.Background(), realKeys.Epoch(0)).Result()
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f]{40}:\d+:2$`, v, "the marker holds the server's run id, the quarantine's end and, as it was written where none was, that the slot holds no key of the layout before the fencing records")
}

// TestRealMarkFresh: a keyspace declared fresh takes its first leases at
// once; a marker that exists is left alone; after a loss the quarantine
// applies again.
func TestRealMarkFresh(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	m := r.manager(t, "a", withQuarantine(time.Minute))
	n, err := MarkFresh(ctx, r.rdb, realKeys)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NotNil(t, acquireOne(t, m, "s").Lease, "a fresh keyspace does not wait")
	n, err = MarkFresh(ctx, r.rdb, realKeys)
	require.NoError(t, err)
	require.Zero(t, n, "an existing marker is left alone")

	require.NoError(t, r.rdb.FlushAll(ctx).Err())
	require.True(t, acquireOne(t, m, "t").Quarantined, "a loss after the start is quarantined")
}

// TestRealHolderStartsTheQuarantineOfALossItSees: a holder whose renewal
// or release finds its lease gone writes the slot's loss marker at once,
// as an acquisition would, so that a loss that took the sessions too
// (FLUSHALL, a restart without persistence) is quarantined from then, not
// from when the sessions are written again and asked for. A lease found
// held by another owner value (an ordinary expiry) changes no marker.
func TestRealHolderStartsTheQuarantineOfALossItSees(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		see  func(ctx context.Context, m *Manager, l *Lease)
	}{
		{"renewal", func(ctx context.Context, m *Manager, l *Lease) {
			require.Equal(t, []*Lease{l}, m.RenewAll(ctx).Lost)
		}},
		{"release", func(ctx context.Context, m *Manager, l *Lease) {
			require.NoError(t, m.Release(ctx, l))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startReal(t)
			ctx := context.Background()
			const q = time.Minute
			_, err := MarkFresh(ctx, r.rdb, realKeys)
			require.NoError(t, err)
			a := r.manager(t, "a", useRealClock, withQuarantine(q))
			b := r.manager(t, "b", useRealClock, withQuarantine(q))
			old := acquireOne(t, a, "s").Lease
			require.NotNil(t, old)
			fresh, err := r.rdb.Get(ctx, realKeys.Epoch(0)).Result()
			require.NoError(t, err)

			// Another owner value in the key: not a loss, the marker stays.
			require.NoError(t, r.rdb.Set(ctx, realKeys.Lease("s"), "someone-else", time.Minute).Err())
			tc.see(ctx, a, old)
			marker, err := r.rdb.Get(ctx, realKeys.Epoch(0)).Result()
			require.NoError(t, err)
			require.Equal(t, fresh, marker, "an ordinary lost lease rewrote the loss marker")
			require.NoError(t, r.rdb.Del(ctx, realKeys.Lease("s")).Err())

			old = acquireOne(t, a, "s").Lease
			require.NotNil(t, old)
			require.NoError(t, r.rdb.FlushAll(ctx).Err())
			tc.see(ctx, a, old)
			marker, err = r.rdb.Get(ctx, realKeys.Epoch(0)).Result()
			require.NoError(t, err, "the holder that saw its lease gone did not write the loss marker")
			left := ParseLossMarker(marker).QuarantineLeft(time.Now())
			require.Greater(t, left, q-10*time.Second)
			require.LessOrEqual(t, left, q+time.Second)

			res := acquireOne(t, b, "t")
			require.True(t, res.Quarantined, "a free lease is quarantined from the holder's probe")
			require.LessOrEqual(t, res.Remaining, left+time.Second)
		})
	}
}
