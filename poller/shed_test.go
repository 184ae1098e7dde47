package poller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// TestSheddingSteps: the fraction drops by shedStep per whole span behind,
// not below shedFloor, and climbs by recoverStep per recoverSpans spans
// without being behind; a stretch of either is timed from its start.
func TestSheddingSteps(t *testing.T) {
	const span = 30 * time.Second
	t0 := time.Unix(1000, 0)
	var s shedding
	at := func(d time.Duration, behind bool) (float64, bool) { return s.step(t0.Add(d), behind, span) }

	f, changed := at(0, false)
	require.Equal(t, 1.0, f)
	require.False(t, changed)
	f, changed = at(5*time.Second, true) // behind begins
	require.False(t, changed)
	f, changed = at(5*time.Second+span-time.Millisecond, true)
	require.False(t, changed, "not a whole span behind yet")
	f, changed = at(5*time.Second+span, true)
	require.True(t, changed)
	require.Equal(t, shedStep, f)
	for i := 2; i <= 10; i++ {
		f, _ = at(5*time.Second+time.Duration(i)*span, true)
	}
	require.Equal(t, shedFloor, f, "never below the floor")
	_, changed = at(5*time.Second+11*span, true)
	require.False(t, changed, "at the floor: nothing more to shed")

	// Caught up at 400 s: one step back per recoverSpans spans.
	f, changed = at(400*time.Second, false)
	require.False(t, changed)
	f, changed = at(400*time.Second+recoverSpans*span-time.Second, false)
	require.False(t, changed)
	f, changed = at(400*time.Second+recoverSpans*span, false)
	require.True(t, changed)
	require.InDelta(t, shedFloor+recoverStep, f, 1e-9)

	// Behind again for less than a span, then keeping up: the recovery
	// restarts from the end of that stretch.
	at(400*time.Second+recoverSpans*span+time.Second, true)
	f, changed = at(400*time.Second+recoverSpans*span+10*time.Second, false)
	require.False(t, changed)
	require.InDelta(t, shedFloor+recoverStep, f, 1e-9, "a short stretch behind sheds nothing")
	f, changed = at(400*time.Second+2*recoverSpans*span+10*time.Second, false)
	require.True(t, changed)
	require.InDelta(t, shedFloor+2*recoverStep, f, 1e-9)
	for i := 3; i < 12; i++ {
		f, _ = at(400*time.Second+time.Duration(i)*recoverSpans*span+10*time.Second, false)
	}
	require.Equal(t, 1.0, f, "never above the whole weight")
}

// TestBehindWorkerShedsLoad: of two workers, the one whose polls are too
// slow for its share stays behind, lowers the weight its heartbeat carries
// step by step to the floor, and its peer takes the load it sheds; a
// worker with KeepWeightWhenBehind keeps its share.
func TestBehindWorkerShedsLoad(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			client := redistest.Start(t).Client(t)
			// At 500 ms: due 240 polls/s, which the fast worker runs even
			// under -race on a loaded machine (at 100 ms, 1,200 polls/s,
			// it fell behind there, rightly, by the due/achieved rule).
			ids := addSessions(t, client, 120, 500*time.Millisecond)
			fast := PollFunc(func(context.Context, session.Session, *lease.Lease) error { return nil })
			slow := PollFunc(func(ctx context.Context, _ session.Session, _ *lease.Lease) error {
				select { // a target that takes 100 ms to answer
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				return nil
			})
			cfgSlow := fastConfig(client, "slow", slow)
			cfgSlow.MaxPolls, cfgSlow.DiscoveryInterval, cfgSlow.KeepWeightWhenBehind = 2, 300*time.Millisecond, keep
			cfgFast := fastConfig(client, "fast", fast)
			cfgFast.DiscoveryInterval = 300 * time.Millisecond
			s := start(t, cfgSlow)
			f := start(t, cfgFast)
			require.Equal(t, 1.0, s.c.PollStats().PlannedWeight)

			// Both hold sessions, and the slow one (20 polls/s for a share of
			// ~120) falls behind.
			require.Eventually(t, func() bool { return s.c.PollStats().Behind }, 20*time.Second, 10*time.Millisecond)
			if keep {
				// It stays behind at its whole weight and keeps its share.
				require.Never(t, func() bool { return s.c.PollStats().PlannedWeight != 1 }, 4*cfgSlow.LeaseTTL, 50*time.Millisecond)
				require.Greater(t, s.c.Leases().Count(), len(ids)/4)
				return
			}
			require.Eventually(t, func() bool { return s.c.PollStats().PlannedWeight == shedFloor }, 30*time.Second, 10*time.Millisecond,
				"sheds to the floor while behind")
			infos, err := s.c.registry.Get(context.Background(), "slow")
			require.NoError(t, err)
			require.Equal(t, shedFloor, infos[0].PlanWeight(), "the heartbeat carries it")
			// Planned 1 : 0.25, the fast worker holds about 4/5 of the sessions.
			require.Eventually(t, func() bool {
				n := s.c.Leases().Count()
				return n > 0 && n <= len(ids)*3/10 && f.c.Leases().Count()+n == len(ids)
			}, 30*time.Second, 10*time.Millisecond, "slow holds %d, fast %d of %d", s.c.Leases().Count(), f.c.Leases().Count(), len(ids))
			require.Equal(t, 1.0, f.c.PollStats().PlannedWeight, "the worker that keeps up sheds nothing")
		})
	}
}
