package lease

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOneExpiryTimerPerScriptCall(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a")
	ctx := context.Background()
	res := m.Acquire(ctx, []string{"s1", "s2", "s3"})
	require.Equal(t, 1, f.clock.Waiters(), "one call, one timer")

	f.clock.Step(time.Second)
	more := acquireOne(t, m, "s4").Lease
	require.Equal(t, 2, f.clock.Waiters())

	f.clock.Step(time.Second)
	require.Equal(t, 4, m.RenewAll(ctx).Renewed)
	require.Equal(t, 1, f.clock.Waiters(), "renewed together: the older timers are stopped")

	require.NoError(t, m.Release(ctx, res[0].Lease, more))
	require.Equal(t, 1, f.clock.Waiters())
	require.NoError(t, m.ReleaseAll(ctx))
	require.Zero(t, f.clock.Waiters(), "no timer outlives the leases")
}

func TestRenewedLeaseExpiresAtItsNewDeadline(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a")
	ctx := context.Background()
	res := m.Acquire(ctx, []string{"kept", "taken"})
	kept, taken := res[0].Lease, res[1].Lease
	first := kept.Deadline()

	f.clock.Step(time.Second)
	f.mr.Del("poll:lease:{taken}")
	rep := m.RenewAll(ctx)
	require.Equal(t, 1, rep.Renewed)
	require.Equal(t, []*Lease{taken}, rep.Lost)
	require.Equal(t, first.Add(time.Second), kept.Deadline())
	require.Equal(t, 1, f.clock.Waiters(), "the first call's timer has no lease left")

	f.clock.Step(first.Sub(f.clock.Now()))
	require.Equal(t, Held, kept.State(), "the old deadline no longer applies")
	f.clock.Step(kept.Deadline().Sub(f.clock.Now()) - time.Millisecond)
	require.Equal(t, Held, kept.State())
	f.clock.Step(time.Millisecond)
	require.Eventually(t, func() bool { return kept.State() == Lost }, time.Second, time.Millisecond)
	require.Equal(t, "deadline passed", kept.Reason())
	require.Zero(t, m.Count())
}

func TestUncertainLeaseKeepsItsDeadline(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a")
	ctx := context.Background()
	l := acquireOne(t, m, "s").Lease
	first := l.Deadline()
	f.clock.Step(time.Second)
	f.mr.SetError("ERR down")
	require.Equal(t, []*Lease{l}, m.RenewAll(ctx).Uncertain)
	f.mr.SetError("")
	require.Equal(t, first, l.Deadline())
	f.clock.Step(first.Sub(f.clock.Now()))
	require.Eventually(t, func() bool { return l.State() == Lost }, time.Second, time.Millisecond)
}

// Renewals, releases, acquisitions and expiries race; run with -race. Every
// lease still listed must be Held or Uncertain and belong to a group whose
// deadline is its own.
func TestExpiryGroupsUnderConcurrency(t *testing.T) {
	f := newFixture(t)
	m := f.manager(t, "a", func(c *Config) { c.BatchSize = 7 })
	ctx := context.Background()
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%02d", i)
	}
	m.Acquire(ctx, ids)
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				switch (i + w) % 3 {
				case 0:
					m.RenewAll(ctx)
				case 1:
					_ = m.Release(ctx, m.Get(ids[(i*7+w)%len(ids)]))
				case 2:
					m.Acquire(ctx, ids[(i*w)%len(ids):])
				}
			}
		}()
	}
	for i := 0; i < 20; i++ {
		f.clock.Step(100 * time.Millisecond)
	}
	wg.Wait()
	for _, l := range m.Held() {
		l.mu.Lock()
		if l.state == Held || l.state == Uncertain {
			require.NotNil(t, l.group, l.session)
			require.Equal(t, l.deadline, l.group.deadline, l.session)
			require.Positive(t, l.group.live.Load(), l.session)
		}
		l.mu.Unlock()
	}
}
