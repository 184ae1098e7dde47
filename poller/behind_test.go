package poller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/session"
)

// TestOwed: a poll that began lag after it would have if the worker kept
// up stands for 1 + lag/interval polls due; behind is judged on the lag
// beyond a tenth of the interval (at most 100 ms).
func TestOwed(t *testing.T) {
	for _, tt := range []struct {
		lag, interval     time.Duration
		wantDue, wantJudg float64
	}{
		{lag: 0, interval: time.Second, wantDue: 1, wantJudg: 1},
		{lag: -time.Second, interval: time.Second, wantDue: 1, wantJudg: 1},
		{lag: 50 * time.Millisecond, interval: time.Second, wantDue: 1.05, wantJudg: 1},
		{lag: time.Second, interval: time.Second, wantDue: 2, wantJudg: 1.9},
		{lag: 500 * time.Millisecond, interval: 500 * time.Millisecond, wantDue: 2, wantJudg: 1.9},
		{lag: 10 * time.Second, interval: time.Minute, wantDue: 1 + 1.0/6, wantJudg: 1 + 9.9/60},
		{lag: time.Second, interval: 0, wantDue: 1, wantJudg: 1},
	} {
		t.Run(fmt.Sprintf("%v of %v", tt.lag, tt.interval), func(t *testing.T) {
			due, judged := owed(tt.lag, tt.interval)
			require.InDelta(t, tt.wantDue, due, 1e-9)
			require.InDelta(t, tt.wantJudg, judged, 1e-9)
		})
	}
}

// TestJudgeBehind: behind when fewer than 90 % of the polls due ran, with
// at least behindEvidence polls, until 95 % run again; or while a poll
// has waited too long for a slot.
func TestJudgeBehind(t *testing.T) {
	for _, tt := range []struct {
		name       string
		c          meterCounts
		was, stuck bool
		want       bool
	}{
		{name: "keeping up", c: meterCounts{judged: 100, done: 100}},
		{name: "1.5x overload", c: meterCounts{judged: 150, done: 100}, want: true},
		{name: "3x overload", c: meterCounts{judged: 300, done: 100}, want: true},
		{name: "just under capacity does not become behind", c: meterCounts{judged: 108, done: 100}},
		{name: "behind stays behind under 95 %", c: meterCounts{judged: 108, done: 100}, was: true, want: true},
		{name: "behind clears at 95 %", c: meterCounts{judged: 105, done: 100}, was: true},
		{name: "too few polls to judge", c: meterCounts{judged: 30, done: 7}},
		{name: "no polls", c: meterCounts{}, was: true},
		{name: "stuck without polls", c: meterCounts{}, stuck: true, want: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, judgeBehind(tt.c, tt.was, tt.stuck))
		})
	}
}

// TestBehindReason: the limit most polls waited for, or the CPU when
// fewer than one poll in ten waited.
func TestBehindReason(t *testing.T) {
	for _, tt := range []struct {
		c    meterCounts
		want string
	}{
		{c: meterCounts{done: 100, groupWaits: 80}, want: BehindHostLimit},
		{c: meterCounts{done: 100, slotWaits: 80, groupWaits: 5}, want: BehindMaxPolls},
		{c: meterCounts{done: 100, slotWaits: 40, groupWaits: 40}, want: BehindHostLimit},
		{c: meterCounts{done: 100, slotWaits: 9}, want: BehindCPU},
		{c: meterCounts{done: 100}, want: BehindCPU},
	} {
		t.Run(tt.want, func(t *testing.T) {
			require.Equal(t, tt.want, behindReason(tt.c))
		})
	}
}

// TestPollMeter: the window sums the last behindWindow of polls and waits,
// and forgets what is older.
func TestPollMeter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var m pollMeter
	// 2 polls due per poll run, 10 a second, for 2 s.
	for i := range 20 {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		m.polled(at, 2, 1.9)
		m.waited(at, waitGroup)
	}
	c, span := m.window(t0.Add(2 * time.Second))
	require.Equal(t, 20, c.done)
	require.InDelta(t, 40, c.due, 1e-9)
	require.InDelta(t, 38, c.judged, 1e-9)
	require.Equal(t, 20, c.groupWaits)
	require.Equal(t, 2*time.Second, span, "no longer than since the first record")

	// Keeping up from 2 s on, one poll due per poll run.
	for i := range 40 {
		m.polled(t0.Add(2*time.Second+time.Duration(i)*100*time.Millisecond), 1, 1)
	}
	c, span = m.window(t0.Add(6 * time.Second))
	require.Equal(t, behindWindow-meterBucket, span)
	require.Equal(t, 35, c.done, "what is older than the window is forgotten")
	require.InDelta(t, 35, c.due, 1e-9)
	require.Zero(t, c.groupWaits)

	c, _ = m.window(t0.Add(time.Hour))
	require.Equal(t, meterCounts{}, c, "an idle hour forgets everything")
}

// TestSchedulerGroupWaitsInOrderOfDue: with a group bound of 1, the due
// polls of the group wait in the scheduler (not in a running poll, not
// holding a slot of the limit), and the slot a poll frees goes to the
// poll due earliest.
func TestSchedulerGroupWaitsInOrderOfDue(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) {
		c.Limit = 10
		c.GroupOf = func(s *session.Session) (string, int) {
			if s.ID == "other" {
				return "elsewhere", 1
			}
			return "host", 1
		}
	})
	a := f.start("a")
	pa := f.nextPoll()
	f.clock.Step(10 * time.Millisecond)
	c := f.start("c")
	f.waitPhase(c, groupWaiting)
	f.clock.Step(10 * time.Millisecond)
	b := f.start("b")
	f.waitPhase(b, groupWaiting)
	// b came later, but is due earlier than c.
	f.sched.mu.Lock()
	b.group.waiting.remove(b.index)
	b.next = b.next.Add(-time.Second)
	b.rank = b.next
	b.group.waiting.push(b, f.clock.Now())
	f.sched.mu.Unlock()

	o := f.start("other") // another group has room
	po := f.nextPoll()
	require.Equal(t, o, po.w)
	st := f.sched.Stats(false)
	require.Equal(t, 2, st.Running)
	require.Equal(t, 2, st.Waiting)

	close(pa.finish)
	pb := f.nextPoll()
	require.Equal(t, b, pb.w, "the slot goes to the poll due earliest")
	f.waitPhase(a, queued)
	f.waitPhase(c, groupWaiting)
	close(pb.finish)
	pc := f.nextPoll()
	require.Equal(t, c, pc.w)
	close(pc.finish)
	close(po.finish)
	close(f.nextPoll().finish) // b's
	f.waitPhase(c, queued)
	f.stopAll(a, b, c, o)
	st = f.sched.Stats(false)
	require.Zero(t, st.Waiting)
	require.EqualValues(t, 3, st.Deferred, "b and c, then b again (due at once after its poll)")
	require.EqualValues(t, 3, st.GroupWaits, "each of those waited for a slot of its group")
	_, backoff := held(f.sched)
	require.Zero(t, backoff)
}

// TestSchedulerStopsAWaitingPoll: a poll waiting for its group's slot or
// for one of the limit's leaves its heap when its loop is stopped, and
// gives back the group slot it held.
func TestSchedulerStopsAWaitingPoll(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) {
		c.Limit = 1
		c.GroupOf = func(s *session.Session) (string, int) {
			if s.ID == "c" {
				return "h2", 1
			}
			return "host", 1
		}
	})
	f.start("a")
	pa := f.nextPoll()
	b := f.start("b")
	f.waitPhase(b, groupWaiting)
	f.sched.Stop(b)
	requireDone(t, f.sched, b)

	// Another group's poll waits for the limit's only slot, holding its
	// group's; stopped, it gives that back.
	c := f.start("c")
	f.waitPhase(c, admitting)
	f.sched.mu.Lock()
	require.Equal(t, 1, f.sched.groups["h2"].active)
	f.sched.mu.Unlock()
	f.sched.Stop(c)
	requireDone(t, f.sched, c)
	f.sched.mu.Lock()
	require.Nil(t, f.sched.groups["h2"], "a group without members is forgotten")
	f.sched.mu.Unlock()
	close(pa.finish)
	f.stopAll(pa.w)
	st := f.sched.Stats(false)
	require.Zero(t, st.Waiting)
	require.Zero(t, st.Running)
}

// TestSchedulerSkippedPollIsNoFailure: a poll the Poller did not send for
// want of a local resource (ErrNoCapacity) neither backs the session off
// nor resets its failures; the session is polled at its next due time.
func TestSchedulerSkippedPollIsNoFailure(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) { c.MaxBackoff = time.Minute })
	a := f.start("a")
	p := f.nextPoll()
	p.skip.Store(true)
	close(p.finish)
	f.waitPhase(a, queued)
	_, next := f.phaseOf(a)
	require.Equal(t, p.at.Add(schedInterval), next, "at its next due time, without backoff")
	st := f.sched.Stats(false)
	_, backoff := held(f.sched)
	require.Zero(t, backoff)
	require.EqualValues(t, 1, st.Skipped)
	f.stopAll(a)
}

// TestSchedulerReportsBehindWithTheHost: on a fake clock, four sessions at
// 1 s whose host runs one poll at a time, each taking 500 ms, run 2 polls
// a second of the 4 due: the worker is behind for the host within a few
// seconds, every session polled in turn (each gap about 2 s); with one
// session left it catches up.
func TestSchedulerReportsBehindWithTheHost(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) {
		c.GroupOf = func(s *session.Session) (string, int) { return "target:80", 1 }
	})
	ws := map[string]*pollLoop{}
	for _, id := range []string{"a", "b", "c", "d"} {
		ws[id] = f.start(id)
	}
	report := func() behindReport { return f.sched.Stats(false).Behind }
	last := map[string]time.Time{}
	var worstGap time.Duration
	var behindAt time.Time
	start := f.clock.Now()
	for range 40 {
		p := f.nextPoll()
		if prev, ok := last[p.w.sess.ID]; ok {
			worstGap = max(worstGap, p.at.Sub(prev))
		}
		last[p.w.sess.ID] = p.at
		require.NoError(t, f.leases.RenewAll(context.Background()).Err)
		f.stepTimer(500 * time.Millisecond)
		close(p.finish)
		if behindAt.IsZero() && report().Behind {
			behindAt = f.clock.Now()
		}
	}
	r := report()
	require.True(t, r.Behind)
	require.Equal(t, BehindHostLimit, r.Reason)
	require.Equal(t, "target:80", r.Group)
	require.InDelta(t, 2, r.Done, 0.3)
	require.InDelta(t, 4, r.Due, 0.6)
	require.LessOrEqual(t, behindAt.Sub(start), 3*time.Second, "reported within a few seconds")
	require.LessOrEqual(t, worstGap, 2500*time.Millisecond, "every session slows alike: interval × due/achieved + 25 %")

	for _, id := range []string{"b", "c", "d"} {
		f.sched.Stop(ws[id])
	}
	a := ws["a"]
	for range 16 {
		p := f.nextPoll()
		require.NoError(t, f.leases.RenewAll(context.Background()).Err)
		f.stepTimer(300 * time.Millisecond)
		close(p.finish)
		if p.w != a {
			continue // a stopped session's last poll
		}
		// a is queued for its next poll, or (late) polls again at once.
		require.Eventually(t, func() bool { ph, _ := f.phaseOf(a); return ph == queued || len(f.polls) > 0 }, waitFor, time.Millisecond)
		if ph, next := f.phaseOf(a); ph == queued {
			f.stepTimer(next.Sub(f.clock.Now()))
		}
	}
	require.False(t, report().Behind, "one session at 1 s keeps up")
	f.stopAll(a)
}

// stopAll stops ws and lets every poll still running or starting return,
// until each has exited.
func (f *schedFixture) stopAll(ws ...*pollLoop) {
	f.t.Helper()
	for _, w := range ws {
		f.sched.Stop(w)
	}
	for _, w := range ws {
		for done := false; !done; {
			select {
			case <-f.sched.Exited(w):
				done = true
			case p := <-f.polls:
				close(p.finish)
			case <-time.After(waitFor):
				f.t.Fatalf("worker %s did not exit", w.sess.ID)
			}
		}
	}
}

// TestOverloadText: the one line /readyz, the status page and status show.
func TestOverloadText(t *testing.T) {
	for _, tt := range []struct {
		s    PollStats
		want string
	}{
		{s: PollStats{DueRate: 10, AchievedRate: 10}, want: ""},
		{s: PollStats{Behind: true, BehindReason: BehindHostLimit, BehindHost: "t:80", DueRate: 6000, AchievedRate: 2950, Waiting: 3540},
			want: "host-limit (host t:80): runs 2950 of 6000 polls/s due; each session is polled about every 2.03 intervals"},
		{s: PollStats{Behind: true, BehindReason: BehindCPU, DueRate: 15000, AchievedRate: 10000, Waiting: 2345},
			want: "cpu: runs 10000 of 15000 polls/s due; each session is polled about every 1.50 intervals"},
		{s: PollStats{Behind: true, BehindReason: BehindMaxPolls},
			want: "max-polls: polls wait for a slot longer than their interval"},
	} {
		t.Run(tt.want, func(t *testing.T) { require.Equal(t, tt.want, tt.s.Overload()) })
	}
}

// TestSchedulerLimitBelowGroupBoundStarvesNone: with the limit (2) below
// a group's bound (4) and every session due again at once after its poll,
// the polls that wait for a slot of the limit holding their group's slot
// are not overtaken forever by the polls that take a group slot as it
// frees: every session is polled, alike (found with 1,000 sessions of one
// host, --max-polls 16 and --max-per-host 64: 48 were never polled).
func TestSchedulerLimitBelowGroupBoundStarvesNone(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) {
		c.Limit = 2
		c.GroupOf = func(*session.Session) (string, int) { return "host", 4 }
	})
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	const interval = time.Millisecond // the fake clock moves 2 per poll: far within the TTL
	var loops []*pollLoop
	for _, id := range ids {
		r := f.leases.Acquire(context.Background(), []string{id})
		require.NotNil(t, r[0].Lease)
		w := &pollLoop{sess: &session.Session{ID: id, Interval: session.Duration(interval)}, lease: r[0].Lease}
		f.sched.Start(w, time.Time{})
		loops = append(loops, w)
	}
	running := []pollCall{f.nextPoll(), f.nextPoll()}
	polls := map[string]int{}
	const rounds = 64
	for range rounds {
		// The poll overruns its interval: its session is due again at
		// once, and waits behind the others.
		f.stepTimer(2 * interval)
		close(running[0].finish)
		next := f.nextPoll()
		polls[next.w.sess.ID]++
		running = append(running[1:], next)
	}
	for _, id := range ids {
		require.GreaterOrEqual(t, polls[id], rounds/len(ids)-1, "session %s polled %d times in %d polls: %v", id, polls[id], rounds, polls)
	}
	require.Zero(t, f.sched.Stats(false).GroupWaits, "the limit held the group's slots, not the group's bound")
	for _, p := range running {
		close(p.finish)
	}
	f.stopAll(loops...)
}

// TestBehindNews: a worker logs when it falls behind, catches up or
// changes reason, and, still behind, when its slowdown moved by more than
// a quarter since the line before and 30 s have passed (the first line
// gives a window partly before it fell behind: 1.56 intervals logged
// against 2.9 measured).
func TestBehindNews(t *testing.T) {
	behind := func(due, done float64) PollStats {
		return PollStats{Behind: true, BehindReason: BehindMaxPolls, DueRate: due, AchievedRate: done}
	}
	for _, tt := range []struct {
		name  string
		was   PollStats
		cur   PollStats
		ago   time.Duration
		logIt bool
	}{
		{"falls behind", PollStats{}, behind(80, 50), time.Hour, true},
		{"catches up", behind(80, 50), PollStats{DueRate: 50, AchievedRate: 50}, time.Second, true},
		{"another reason", behind(80, 50), PollStats{Behind: true, BehindReason: BehindCPU, DueRate: 80, AchievedRate: 50}, time.Second, true},
		{"another host", PollStats{Behind: true, BehindReason: BehindHostLimit, BehindHost: "a"}, PollStats{Behind: true, BehindReason: BehindHostLimit, BehindHost: "b"}, time.Second, true},
		{"slowdown moved, soon after", behind(80, 50), behind(230, 78), 10 * time.Second, false},
		{"slowdown moved, later", behind(80, 50), behind(230, 78), 31 * time.Second, true},
		{"slowdown went down by a half", behind(230, 78), behind(80, 50), time.Minute, true},
		{"slowdown about the same", behind(230, 78), behind(240, 78), time.Hour, false},
		{"keeps up", PollStats{DueRate: 10, AchievedRate: 10}, PollStats{DueRate: 20, AchievedRate: 20}, time.Hour, false},
	} {
		t.Run(tt.name, func(t *testing.T) { require.Equal(t, tt.logIt, behindNews(tt.was, tt.cur, tt.ago)) })
	}
}
