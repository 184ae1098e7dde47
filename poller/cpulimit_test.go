package poller

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/session"
)

// TestCPULimitStep: the limit of polls at once falls to half of what runs
// while the process is busy (never below the floor), rises by a
// quarter while polls wait for it and the CPU has room (never above
// MaxPolls), and holds otherwise; latency without a run queue of our own
// (a busy machine, not a busy process) is not busy.
func TestCPULimitStep(t *testing.T) {
	busy := cpuSample{procs: 2, runnable: 40, latency: 5 * time.Millisecond}
	idle := cpuSample{procs: 2, runnable: 0, latency: 20 * time.Microsecond}
	neighbour := cpuSample{procs: 2, runnable: 1, latency: 8 * time.Millisecond}
	for _, tt := range []struct {
		name     string
		cur      int
		waited   bool
		s        cpuSample
		active   int
		want     int
		wantRose bool
	}{
		{name: "busy: half of what runs", cur: 1024, s: busy, active: 1024, want: 512},
		{name: "busy with few running: half of those", cur: 1024, s: busy, active: 200, want: 100},
		{name: "busy: not below the floor", cur: 200, s: busy, active: 100, want: 64},
		{name: "busy at the floor stays", cur: 64, s: busy, active: 64, want: 64},
		{name: "busy even when polls wait", cur: 300, waited: true, s: busy, active: 300, want: 150},
		{name: "room and polls waited: a quarter more", cur: 100, waited: true, s: idle, active: 100, want: 125, wantRose: true},
		{name: "room, polls waited, small: at least one more", cur: 3, waited: true, s: idle, active: 3, want: 4, wantRose: true},
		{name: "room, polls waited: not above MaxPolls", cur: 1000, waited: true, s: idle, active: 1000, want: 1024, wantRose: true},
		{name: "room, none waited: holds", cur: 100, s: idle, active: 10, want: 100},
		{name: "latency without our run queue is a busy machine: holds", cur: 100, s: neighbour, active: 100, want: 100},
		{name: "run queue without latency: holds", cur: 100, s: cpuSample{procs: 2, runnable: 10}, active: 100, want: 100},
		{name: "no processors known: holds", cur: 100, s: cpuSample{runnable: 100, latency: time.Second}, active: 100, want: 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCPULimit(1024, 2)
			c.cur, c.waited = tt.cur, tt.waited
			now := time.Unix(1000, 0)
			require.True(t, c.due(now))
			rose := c.step(now, tt.s, tt.active, false)
			require.Equal(t, tt.want, c.limit())
			require.Equal(t, tt.wantRose && tt.want > tt.cur, rose)
			require.False(t, c.waited, "a step starts a new period")
			require.False(t, c.due(now.Add(cpuLimitPeriod-time.Millisecond)))
			require.True(t, c.due(now.Add(cpuLimitPeriod)))
			require.Equal(t, c.limit() < 1024, c.lowered())
			require.Equal(t, c.lowered() || tt.s.busy(), c.cpuBound(), "a poll waiting now waits for the CPU")
		})
	}
}

// TestCPULimitOff: with MaxPolls off there is no limit to adapt; with a
// MaxPolls below the floor, the floor is MaxPolls.
func TestCPULimitOff(t *testing.T) {
	c := newCPULimit(-1, 2)
	require.False(t, c.due(time.Unix(1000, 0)))
	require.LessOrEqual(t, c.limit(), 0)
	small := newCPULimit(4, 8)
	small.step(time.Unix(1000, 0), cpuSample{procs: 8, runnable: 100, latency: time.Second}, 4, true)
	// Polls waiting now count as having waited.
	w := newCPULimit(1024, 2)
	w.cur = 100
	require.True(t, w.step(time.Unix(1000, 0), cpuSample{procs: 2}, 100, true))
	require.Equal(t, 125, w.limit())
	require.Equal(t, 4, small.limit())
}

// TestLatencyQuantile: the quantile of what a histogram gained between
// two reads, as the lower bound of its bucket.
func TestLatencyQuantile(t *testing.T) {
	buckets := []float64{math.Inf(-1), 0.0001, 0.001, 0.01, math.Inf(1)}
	prev := []uint64{0, 100, 0, 0}
	for _, tt := range []struct {
		name   string
		counts []uint64
		q      float64
		want   time.Duration
	}{
		{name: "nothing new", counts: []uint64{0, 100, 0, 0}, q: 0.9, want: 0},
		{name: "all fast", counts: []uint64{50, 100, 0, 0}, q: 0.9, want: 0},
		{name: "p90 in the 1-10 ms bucket", counts: []uint64{0, 105, 5, 90}, q: 0.9, want: 10 * time.Millisecond},
		{name: "only the earlier counts are slow", counts: []uint64{0, 200, 0, 0}, q: 0.9, want: 100 * time.Microsecond},
		{name: "p90 in the 1 ms bucket", counts: []uint64{0, 100, 95, 5}, q: 0.9, want: time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, latencyQuantile(tt.counts, prev, buckets, tt.q))
		})
	}
}

// TestRuntimeCPUSamples: the runtime exports what the sampler reads.
func TestRuntimeCPUSamples(t *testing.T) {
	r := newRuntimeCPU()
	require.NotNil(t, r, "the runtime exports %s and %s", metricRunnable, metricLatencies)
	s := r.sample()
	require.Positive(t, s.procs)
	require.GreaterOrEqual(t, s.latency, time.Duration(0))
}

// TestSchedulerLowersThePollLimitWhileTheCPUIsBusy: while the sampled CPU
// is busy the polls due beyond half of those running wait, in
// order of due time, and a worker behind says the CPU is why; once the
// CPU has room and polls wait, the limit rises and admits them.
func TestSchedulerLowersThePollLimitWhileTheCPUIsBusy(t *testing.T) {
	var mu sync.Mutex
	sample := cpuSample{procs: 1, runnable: 10, latency: 5 * time.Millisecond}
	f := newSchedFixture(t, func(c *schedConfig) {
		c.Limit = 64
		c.CPU = func() cpuSample { mu.Lock(); defer mu.Unlock(); return sample }
	})
	f.sched.mu.Lock()
	f.sched.limit.floor = 16 // a small fleet of polls: cpuLimitFloor is 64
	f.sched.mu.Unlock()
	const n = 40
	var calls []pollCall
	var loops []*pollLoop
	for i := range n {
		loops = append(loops, f.start(fmt.Sprintf("s%02d", i)))
		calls = append(calls, f.nextPoll())
	}
	first := loops[0]
	// The first poll's return steps the limit: busy with 39 running → 19.
	close(calls[0].finish)
	calls = calls[1:]
	f.waitPhase(first, queued)
	require.Equal(t, 19, f.sched.Stats(false).Limit, "busy with 39 running: half of them")
	// The loop that returned is due again an interval later, when the
	// next step (still busy) takes the limit to its floor (half of 19 is
	// below 16); with 39 running it waits, for the CPU.
	f.stepTimer(schedInterval)
	require.Eventually(t, func() bool { return f.sched.Stats(false).Waiting == 1 }, waitFor, time.Millisecond)
	require.Equal(t, 16, f.sched.Stats(false).Limit, "busy again: the floor")
	requireNoPoll(t, f)
	f.sched.mu.Lock()
	require.Equal(t, waitCPU, f.sched.slotKindLocked())
	f.sched.mu.Unlock()

	// 23 polls return: 16 run, as many as the limit; they are due again
	// (an interval passed) and wait with the first.
	for _, c := range calls[:23] {
		close(c.finish)
	}
	calls = calls[23:]
	require.Eventually(t, func() bool { st := f.sched.Stats(false); return st.Running == 16 && st.Waiting == 24 },
		waitFor, time.Millisecond)
	requireNoPoll(t, f)
	// Room again: the next step raises the limit by a quarter and admits
	// four of the waiting polls.
	mu.Lock()
	sample = cpuSample{procs: 1}
	mu.Unlock()
	f.stepTimer(cpuLimitPeriod)
	require.Equal(t, 20, f.sched.Stats(false).Limit, "a quarter more")
	for range 4 {
		calls = append(calls, f.nextPoll())
	}
	st := f.sched.Stats(false)
	require.Equal(t, 20, st.Running)
	require.Equal(t, 20, st.Waiting)
	requireNoPoll(t, f)

	for _, w := range loops {
		f.sched.Stop(w)
	}
	for _, c := range calls {
		close(c.finish)
	}
	for _, w := range loops {
		for exited := false; !exited; {
			select {
			case <-f.sched.Exited(w):
				exited = true
			case c := <-f.polls: // admitted as another loop stopped
				close(c.finish)
			case <-time.After(waitFor):
				t.Fatalf("loop %s did not exit", w.sess.ID)
			}
		}
	}
}

// TestSchedulerGroupFullOfPollsWaitingForTheLimit: a poll that waits for
// its host's slot only because the polls holding them wait for one of the
// limit's waits for the limit, not for its host (the reason given is the
// limit's); a host whose own polls run at its bound is the host's.
func TestSchedulerGroupFullOfPollsWaitingForTheLimit(t *testing.T) {
	for _, tt := range []struct {
		name             string
		limit, hostMax   int
		wantSlot, wantGr int
	}{
		{name: "the limit binds, the host's slots are held by polls waiting for it", limit: 2, hostMax: 3, wantSlot: 2},
		{name: "the host binds", limit: 10, hostMax: 2, wantGr: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newSchedFixture(t, func(c *schedConfig) {
				c.Limit = tt.limit
				c.GroupOf = func(*session.Session) (string, int) { return "host", tt.hostMax }
			})
			var loops []*pollLoop
			var calls []pollCall
			for i := range 2 {
				loops = append(loops, f.start(fmt.Sprintf("r%d", i)))
				calls = append(calls, f.nextPoll())
			}
			for i := range 2 {
				w := f.start(fmt.Sprintf("w%d", i))
				loops = append(loops, w)
				f.sched.mu.Lock()
				p := w.phase
				f.sched.mu.Unlock()
				require.Contains(t, []phase{admitting, groupWaiting}, p)
			}
			f.sched.mu.Lock()
			c, _ := f.sched.meter.window(f.clock.Now())
			f.sched.mu.Unlock()
			require.Equal(t, tt.wantSlot, c.slotWaits, "waits for the limit")
			require.Equal(t, tt.wantGr, c.groupWaits, "waits for the host")
			for _, w := range loops {
				f.sched.Stop(w)
			}
			for _, c := range calls {
				close(c.finish)
			}
			for _, w := range loops {
				requireDone(t, f.sched, w)
			}
		})
	}
}
