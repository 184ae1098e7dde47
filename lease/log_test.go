package lease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestRealLeaseEventsLogOneLinePerCall: a worker taking its share of a
// large fleet logs one info line per Acquire and per release, with the
// count, and each lease at debug only.
func TestRealLeaseEventsLogOneLinePerCall(t *testing.T) {
	ctx := context.Background()
	r := startReal(t)
	logs, withLogs := observed()
	m := r.manager(t, "a", withLogs)
	res := m.Acquire(ctx, []string{"s1", "s2", "s3"})
	for _, x := range res {
		require.NotNil(t, x.Lease, x.Session)
	}
	require.Len(t, m.Acquire(ctx, []string{"s1"}), 1) // already held: nothing new to log
	info := func(msg string) []observer.LoggedEntry {
		return logs.FilterMessage(msg).FilterLevelExact(zapcore.InfoLevel).All()
	}
	acquired := info("leases acquired")
	require.Len(t, acquired, 1, "one line for the call that took leases")
	require.EqualValues(t, 3, acquired[0].ContextMap()["leases"])
	require.Equal(t, 3, logs.FilterMessage("lease acquired").FilterLevelExact(zapcore.DebugLevel).Len(), "each lease at debug")

	require.NoError(t, m.Release(ctx, res[0].Lease, res[1].Lease))
	released := info("leases released")
	require.Len(t, released, 1)
	require.EqualValues(t, 2, released[0].ContextMap()["leases"])
	require.Equal(t, 2, logs.FilterMessage("lease released").FilterLevelExact(zapcore.DebugLevel).Len())
	require.Zero(t, logs.FilterMessage("lease acquired").FilterLevelExact(zapcore.InfoLevel).Len()+
		logs.FilterMessage("lease released").FilterLevelExact(zapcore.InfoLevel).Len(), "no line per lease at info")
	require.NoError(t, m.ReleaseAll(ctx))
}

// TestLeasesLostLogOneLinePerStep: leases lost in one renewal cycle, or
// at one passed deadline, are one warning each with their count and a few
// sessions; each lease's own line is at debug.
func TestLeasesLostLogOneLinePerStep(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	logs, withLogs := observed()
	m := f.manager(t, "a", withLogs)
	res := m.Acquire(ctx, []string{"s1", "s2", "s3", "s4"})
	for _, x := range res {
		require.NotNil(t, x.Lease, x.Session)
	}
	f.mr.Set("poll:lease:{s1}", "other#1")
	f.mr.Del("poll:lease:{s2}")
	rep := m.RenewAll(ctx)
	require.Len(t, rep.Lost, 2)
	warn := func() []observer.LoggedEntry { return logs.FilterLevelExact(zapcore.WarnLevel).All() }
	require.Len(t, warn(), 1, "one line for the cycle")
	require.EqualValues(t, 2, warn()[0].ContextMap()["leases"])
	require.ElementsMatch(t, []any{"s1", "s2"}, warn()[0].ContextMap()["sessions"])
	require.Equal(t, 2, logs.FilterMessage("lease lost").FilterLevelExact(zapcore.DebugLevel).Len(), "each lease at debug")

	f.clock.Step(res[2].Lease.Deadline().Sub(f.clock.Now())) // no renewal: s3 and s4 run out
	require.Eventually(t, func() bool { return len(warn()) == 2 }, 5*time.Second, time.Millisecond)
	lost := warn()[1]
	require.Contains(t, lost.Message, "deadline passed")
	require.EqualValues(t, 2, lost.ContextMap()["leases"])
	require.ElementsMatch(t, []any{"s3", "s4"}, lost.ContextMap()["sessions"])
	require.Zero(t, m.Count())
}

// TestFailedAcquireLogsOneLinePerRequest: a request that fails (Redis
// gone) is one warning with the number of its sessions, not one each.
func TestFailedAcquireLogsOneLinePerRequest(t *testing.T) {
	f := newFixture(t)
	logs, withLogs := observed()
	m := f.manager(t, "a", withLogs)
	f.mr.Close()
	res := m.Acquire(context.Background(), []string{"s1", "s2", "s3"})
	for _, x := range res {
		require.Error(t, x.Err, x.Session)
		require.Nil(t, x.Lease)
	}
	warn := logs.FilterLevelExact(zapcore.WarnLevel).All()
	require.Len(t, warn, 1)
	require.EqualValues(t, 3, warn[0].ContextMap()["sessions"])
}
