package poller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pollworker/pollworker/session"
)

// TestPaceSpreadsFirstPollsTakenTogether: first polls without a schedule
// go firstPollGap apart, the first at once; past the window (half the
// interval, at most maxFirstPollDelay) a burst is spread over the window
// by a hash of the id; a session started alone later is polled at once.
func TestPaceSpreadsFirstPollsTakenTogether(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	s := newScheduler(schedConfig{Clock: clk, Wake: func() {}, Pace: true})
	now := clk.Now()
	w := func(id string, iv time.Duration) *pollLoop {
		return &pollLoop{sess: &session.Session{ID: id, Interval: session.Duration(iv)}}
	}
	for i := range 10 {
		require.Equal(t, now.Add(time.Duration(i)*firstPollGap), s.paceLocked(w("a", time.Second), now), "poll %d", i)
	}

	// A short interval has a short window: 4 ms holds 8 polls at the pace
	// (interval 8 ms), the next ones fall inside it by their hash.
	clk.Step(time.Second)
	now = clk.Now()
	for i := range 8 {
		require.Equal(t, now.Add(time.Duration(i)*firstPollGap), s.paceLocked(w("b", 8*time.Millisecond), now))
	}
	spread := map[time.Duration]bool{}
	for i := range 50 {
		at := s.paceLocked(w(string(rune('c'+i)), 8*time.Millisecond), now)
		require.False(t, at.Before(now))
		require.Less(t, at.Sub(now), 4*time.Millisecond)
		spread[at.Sub(now)] = true
	}
	require.Greater(t, len(spread), 40, "hashed over the window, not piled at its end")

	// Long intervals: the window is maxFirstPollDelay.
	clk.Step(time.Second)
	now = clk.Now()
	for range int(maxFirstPollDelay / firstPollGap) {
		s.paceLocked(w("d", time.Hour), now)
	}
	require.Less(t, s.paceLocked(w("e", time.Hour), now).Sub(now), maxFirstPollDelay)

	// Alone, a while later: at once.
	clk.Step(time.Second)
	require.Equal(t, clk.Now(), s.paceLocked(w("f", time.Second), clk.Now()))
	require.Equal(t, clk.Now(), s.paceLocked(w("g", 0), clk.Now()), "no interval, no window")
}

// TestSchedulerStartPacesOnlyWithoutASchedule: start paces a zero `at`
// (no schedule to keep), and keeps a handed-over schedule as it is.
func TestSchedulerStartPacesOnlyWithoutASchedule(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) { c.Pace = true })
	t0 := f.clock.Now()
	a := f.start("a")
	b := f.start("b")
	first := f.nextPoll()
	require.Equal(t, a, first.w)
	require.Equal(t, t0, first.at)
	phase, next := f.phaseOf(b)
	require.Equal(t, queued, phase)
	require.Equal(t, t0.Add(firstPollGap), next, "the second first poll is paced")
	f.clock.Step(firstPollGap)
	second := f.nextPoll()
	require.Equal(t, b, second.w)
	close(first.finish)
	close(second.finish)
}

// TestRunnersAreReused: a poll launched while a runner is idle runs on
// that runner (the one idle last first), not on a new goroutine; idle
// runners exit when the scheduler closes.
func TestRunnersAreReused(t *testing.T) {
	f := newSchedFixture(t)
	s := f.sched
	idle := func() int {
		s.runMu.Lock()
		defer s.runMu.Unlock()
		return len(s.idle)
	}
	a, b := f.start("a"), f.start("b")
	pa, pb := f.nextPoll(), f.nextPoll()
	require.ElementsMatch(t, []*pollLoop{a, b}, []*pollLoop{pa.w, pb.w}, "each on a runner of its own")
	require.Zero(t, idle(), "both runners busy")
	close(pa.finish)
	close(pb.finish)
	require.Eventually(t, func() bool { return idle() == 2 }, waitFor, time.Millisecond)
	s.runMu.Lock()
	last := s.idle[1]
	s.runMu.Unlock()
	c := f.start("c")
	pc := f.nextPoll()
	require.Same(t, c, pc.w)
	s.runMu.Lock()
	require.Len(t, s.idle, 1)
	require.NotSame(t, last, s.idle[0], "the runner idle last took the poll")
	s.runMu.Unlock()
	close(pc.finish)
	require.Eventually(t, func() bool { return idle() == 2 }, waitFor, time.Millisecond)
	s.Close()
	require.Eventually(t, func() bool { return idle() == 0 }, waitFor, time.Millisecond, "idle runners exit on close")
}

// TestTimerSlack: the timer fires up to the slack after the earliest
// queued poll is due, at most a hundredth of the shortest interval the
// scheduler has started.
func TestTimerSlack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		slack     time.Duration
		intervals []time.Duration // of the workers started, the first queued first
		want      time.Duration   // after the first is due
	}{
		{"no slack", 0, []time.Duration{time.Second}, 0},
		{"long interval: the whole slack", 2 * time.Millisecond, []time.Duration{time.Second}, 2 * time.Millisecond},
		{"100ms interval: a hundredth", 2 * time.Millisecond, []time.Duration{100 * time.Millisecond}, time.Millisecond},
		{"shortest interval", 2 * time.Millisecond, []time.Duration{session.MinInterval}, session.MinInterval / 100},
		{"a shorter interval queued behind", 2 * time.Millisecond, []time.Duration{time.Second, 20 * time.Millisecond}, 200 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSchedFixture(t, func(c *schedConfig) { c.Slack = tc.slack })
			t0 := f.clock.Now()
			for i, iv := range tc.intervals {
				r := f.leases.Acquire(context.Background(), []string{fmt.Sprint("s", i)})
				require.NotNil(t, r[0].Lease)
				w := &pollLoop{sess: &session.Session{ID: fmt.Sprint("s", i), Interval: session.Duration(iv)}, lease: r[0].Lease}
				f.sched.Start(w, t0.Add(5*time.Millisecond+time.Duration(i)*time.Millisecond))
			}
			f.sched.mu.Lock()
			armed := f.sched.armed
			f.sched.mu.Unlock()
			require.Equal(t, t0.Add(5*time.Millisecond+tc.want), armed)
		})
	}
}

// TestPollContextEndsWithItsTerm: a poll's context is cancelled the
// moment its lease's Held term ends; one made after that is never live
// (ok false, cancelled); cancelling a poll's context unregisters it.
func TestPollContextEndsWithItsTerm(t *testing.T) {
	f := newSchedFixture(t)
	r := f.leases.Acquire(context.Background(), []string{"s"})
	require.NotNil(t, r[0].Lease)
	l := r[0].Lease

	ctx, cancel, ok := pollContext(l)
	require.True(t, ok)
	defer cancel()
	require.NoError(t, ctx.Err())
	done, cancelDone, ok := pollContext(l)
	require.True(t, ok)
	cancelDone() // a poll that returned
	require.ErrorIs(t, done.Err(), context.Canceled)
	require.NoError(t, ctx.Err(), "another poll's end cancels only its own context")

	require.NoError(t, f.leases.Release(context.Background(), l))
	require.ErrorIs(t, ctx.Err(), context.Canceled, "cancelled as the term ended, before Release returned")

	late, cancelLate, ok := pollContext(l)
	defer cancelLate()
	require.False(t, ok)
	require.ErrorIs(t, late.Err(), context.Canceled)
}
