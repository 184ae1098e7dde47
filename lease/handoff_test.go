package lease

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

func TestHandoffKeySharesTheLeaseSlot(t *testing.T) {
	tests := []struct {
		name string
		give keyspace.Space
		want string
	}{
		{"default prefix", keyspace.Space{}, "poll:released:{s-1}"},
		{"custom prefix", keyspace.Space{Prefix: "team-a"}, "team-a:released:{s-1}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.give.Released("s-1")
			require.Equal(t, tt.want, got)
			require.Equal(t, strings.Replace(tt.give.Lease("s-1"), ":lease:", ":released:", 1), got,
				"built like the lease key")
			require.Equal(t, keyspace.Slot(tt.give.Lease("s-1")), keyspace.Slot(got))
		})
	}
}

func TestRealHandoffGapAfterRelease(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	a := r.manager(t, "a", useRealClock)
	b := r.manager(t, "b", useRealClock)

	first := acquireOne(t, a, "s").Lease
	require.NotNil(t, first)
	_, ok := first.HandoffGap()
	require.False(t, ok, "a first acquisition follows no release")
	require.NoError(t, a.Release(ctx, first))
	at, pttl := r.mark(t, "s")
	require.NotEqual(t, int64(-1), at, "release leaves a handoff mark")
	require.Greater(t, pttl, int64(0))
	require.LessOrEqual(t, pttl, a.TTL().Milliseconds(), "the mark lives one TTL")

	before := time.Now()
	next := acquireOne(t, b, "s").Lease
	require.NotNil(t, next)
	gap, ok := next.HandoffGap()
	require.True(t, ok, "acquired after a graceful release")
	require.GreaterOrEqual(t, gap, time.Duration(0))
	require.Less(t, gap, time.Second, "the successor took over at once")
	require.False(t, next.Acquired().Before(before), "Acquired is when the reply arrived")
	require.False(t, next.Acquired().After(time.Now()))
	require.Zero(t, r.rdb.Exists(ctx, realKeys.Released("s")).Val(), "the mark is consumed")

	require.True(t, next.MarkPolled(), "first poll")
	require.False(t, next.MarkPolled(), "later polls")

	// The mark is consumed: an acquisition after B's lease expires reports
	// nothing (see TestRealNoHandoffGapAfterExpiry), nor does B's own
	// re-acquisition of a lease it still holds.
	same := acquireOne(t, b, "s").Lease
	require.Same(t, next, same)
	require.NoError(t, b.ReleaseAll(ctx))
}

func TestRealNoHandoffGapAfterExpiry(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	a := r.manager(t, "a", useRealClock, withTTL(ttl))
	b := r.manager(t, "b", useRealClock, withTTL(ttl))

	t.Run("the holder crashed: its lease expired", func(t *testing.T) {
		require.NotNil(t, acquireOne(t, a, "crashed").Lease)
		r.gone(t, "crashed") // A never renews nor releases
		l := acquireOne(t, b, "crashed").Lease
		require.NotNil(t, l)
		_, ok := l.HandoffGap()
		require.False(t, ok)
	})

	t.Run("the release is older than the mark's lifetime", func(t *testing.T) {
		l := acquireOne(t, a, "old").Lease
		require.NotNil(t, l)
		require.NoError(t, a.Release(ctx, l))
		require.Eventually(t, func() bool { return r.rdb.Exists(ctx, realKeys.Released("old")).Val() == 0 },
			5*time.Second, 5*time.Millisecond, "the handoff mark never expired")
		l = acquireOne(t, b, "old").Lease
		require.NotNil(t, l)
		_, ok := l.HandoffGap()
		require.False(t, ok)
	})
	require.NoError(t, b.ReleaseAll(ctx))
}

// An acquisition whose reply was lost consumed the mark in Redis; the retry
// that finds the lease already its own reports no gap (a known gap in the
// measurement, not in the lease).
func TestRealNoHandoffGapOnRetriedAcquire(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	d := &lossyDialer{}
	c := lossyClient(t, r.srv, d, -1)
	a := r.manager(t, "a")
	b := r.manager(t, "b", func(cfg *Config) { cfg.Client = c })
	l := acquireOne(t, a, "s").Lease
	require.NotNil(t, l)
	require.NoError(t, a.Release(ctx, l))
	require.NoError(t, b.acquire.Load(ctx, r.rdb).Err())

	d.armed.Store(true)
	require.Error(t, acquireOne(t, b, "s").Err, "reply lost")
	res := acquireOne(t, b, "s")
	require.NoError(t, res.Err)
	require.NotNil(t, res.Lease)
	_, ok := res.Lease.HandoffGap()
	require.False(t, ok)
	require.NoError(t, b.ReleaseAll(ctx))
}
