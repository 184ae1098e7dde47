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

// TestLeaseSummariesGatheredPerWindow: the leases of one outage expire in
// one group per renewal batch; the lines of one message after the first
// within its window are one line when the window ends, and a window
// that gathered nothing logs nothing.
func TestLeaseSummariesGatheredPerWindow(t *testing.T) {
	f := newFixture(t)
	logs, withLogs := observed()
	m := f.manager(t, "a", withLogs)
	m.summaries.window = time.Hour // ended by the test (end)
	sum := func(n int, sessions ...string) summary {
		return summary{level: zapcore.WarnLevel, msg: "leases lost: test", event: "lost", leases: n, sessions: sessions}
	}
	m.summaries.add(m, sum(500, "s1", "s2", "s3", "s4", "s5"))
	m.summaries.add(m, sum(500, "s6", "s7"))
	m.summaries.add(m, sum(300, "s8", "s9", "s10", "s11", "s12", "s13"))
	m.summaries.add(m, summary{level: zapcore.InfoLevel, msg: "leases held again", event: "recovered", leases: 2, sessions: []string{"s1"}})
	lines := func() []observer.LoggedEntry { return logs.FilterMessage("leases lost: test").All() }
	require.Len(t, lines(), 1, "the first at once; the next two wait for the window's end")
	require.EqualValues(t, 500, lines()[0].ContextMap()["leases"])
	require.Equal(t, 1, logs.FilterMessage("leases held again").Len(), "another message: a window of its own")

	m.summaries.end(m, "leases lost: test")
	require.Len(t, lines(), 2)
	gathered := lines()[1].ContextMap()
	require.EqualValues(t, 800, gathered["leases"])
	require.Equal(t, []any{"s6", "s7", "s8", "s9", "s10"}, gathered["sessions"])
	require.Equal(t, true, gathered["gathered"])

	m.summaries.add(m, sum(7, "s14"))
	require.Len(t, lines(), 2, "the window the end opened gathers it")
	m.summaries.end(m, "leases lost: test")
	m.summaries.end(m, "leases lost: test") // nothing gathered since: closed, nothing logged
	require.Len(t, lines(), 3)
	require.EqualValues(t, 7, lines()[2].ContextMap()["leases"])
	m.summaries.add(m, sum(1, "s15"))
	require.Len(t, lines(), 4, "no window open: at once")
}
