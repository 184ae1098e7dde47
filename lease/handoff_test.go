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
	at, _ = r.mark(t, "s")
	require.Equal(t, int64(-1), at, "the mark is consumed: it no longer counts")

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
		require.Eventually(t, func() bool { at, _ := r.mark(t, "old"); return at == -1 },
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

// TestRealHandOffCarriesTheNextPoll is issue 10 item 4 at the lease level:
// a graceful handoff tells the successor when the session's next poll is
// due, through the Redis server's clock.
func TestRealHandOffCarriesTheNextPoll(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	a := r.manager(t, "a", useRealClock)
	b := r.manager(t, "b", useRealClock)

	tests := []struct {
		name string
		give time.Duration // next poll due this long after the handoff; <0: none given
		want bool
	}{
		{"due later", 3 * time.Second, true},
		{"no schedule given", -1, false},
		{"overdue", -time.Second, true},
		{"due now", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := "next-" + strings.ReplaceAll(tt.name, " ", "-")
			l := acquireOne(t, a, s).Lease
			require.NotNil(t, l)
			_, ok := l.NextPoll()
			require.False(t, ok, "a first acquisition has no schedule to keep")
			h := Handoff{Lease: l}
			sent := time.Now()
			if tt.give != -1 {
				h.NextPoll = sent.Add(tt.give)
			}
			require.NoError(t, a.HandOff(ctx, h))
			handedOff := time.Now()
			if tt.give > 0 {
				_, left := r.mark(t, s)
				require.Greater(t, time.Duration(left)*time.Millisecond, a.TTL(), "the mark outlives the wait for the next poll")
			}
			asked := time.Now()
			next := acquireOne(t, b, s).Lease
			took := time.Since(asked)
			require.NotNil(t, next)
			got, ok := next.NextPoll()
			require.Equal(t, tt.want, ok)
			if ok {
				// The due time crosses through the Redis server's clock as a
				// time left, in whole milliseconds: it comes out later by
				// up to the handoff's one-way time (Redis adds the time
				// left when it runs the script) and, counted from this
				// acquisition's send time, earlier or later by up to its
				// round trip; measured here, so that a loaded machine is
				// held to its own latencies.
				want, slack := sent.Add(max(tt.give, 0)), 2*time.Millisecond
				require.False(t, got.Before(want.Add(-took-slack)), "due %v, want %v (an overdue poll is due at once)", got, want)
				require.False(t, got.After(want.Add(handedOff.Sub(sent)+took+slack)), "due %v, want %v (an overdue poll is due at once)", got, want)
			}
			_, ok = next.HandoffGap()
			require.True(t, ok, "the gap is still reported")
			require.NoError(t, b.Release(ctx, next))
		})
	}

}

// TestNextPollWithin is issue 22 item 2's rule: a successor keeps its
// predecessor's due time only up to a bound (one interval of its own
// definition and the spread step), so that a backed-off due time, or one
// of another definition of the session, never holds its first poll back.
func TestNextPollWithin(t *testing.T) {
	acquired := time.Unix(1000, 0)
	tests := []struct {
		name       string
		nextPollIn time.Duration // -1: no handoff mark said when
		limit      time.Duration
		want       time.Duration // after acquired
		wantOK     bool
	}{
		{"no schedule handed over", -1, time.Second, 0, false},
		{"overdue: at once", 0, time.Second, 0, true},
		{"within the bound: kept", 700 * time.Millisecond, time.Second, 700 * time.Millisecond, true},
		{"at the bound: kept", time.Second, time.Second, time.Second, true},
		{"a backoff beyond it: cut to the bound", time.Minute, time.Second, time.Second, true},
		{"negative bound reads as zero", time.Minute, -time.Second, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &Lease{acquired: acquired, nextPollIn: tt.nextPollIn}
			at, ok := l.NextPollWithin(tt.limit)
			require.Equal(t, tt.wantOK, ok)
			if ok {
				require.Equal(t, acquired.Add(tt.want), at)
			} else {
				require.True(t, at.IsZero())
			}
		})
	}
}
