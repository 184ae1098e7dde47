package poller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// schedFixture drives a scheduler on a fake clock with real leases (on
// miniredis); its polls block until the test lets them return.
type schedFixture struct {
	t      *testing.T
	mr     *miniredis.Miniredis
	clock  *clocktesting.FakeClock
	leases *lease.Manager
	sched  *scheduler
	polls  chan pollCall // one per poll started
}

// pollCall is one running poll: its context, the clock when it started, and
// a channel to close to let it return.
type pollCall struct {
	w      *pollLoop
	ctx    context.Context
	at     time.Time
	finish chan struct{}
	fail   *atomic.Bool  // set before finish: the poll failed
	skip   *atomic.Bool  // set before finish: the poll was not sent (ErrNoCapacity)
	retry  *atomic.Int64 // set before finish: the target's Retry-After (RetryAfterError), in ns
}

const (
	schedTTL      = 3 * time.Second
	schedInterval = time.Second
	waitFor       = 5 * time.Second
)

// newSchedFixture returns a fixture whose scheduler is configured by
// the options (none: no limit, no groups, no backoff, no pacing, no
// slack).
func newSchedFixture(t *testing.T, opts ...func(*schedConfig)) *schedFixture {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	f := &schedFixture{t: t, mr: mr, clock: clocktesting.NewFakeClock(time.Unix(1000, 0)), polls: make(chan pollCall, 16)}
	cfg := schedConfig{Clock: f.clock, Wake: func() {}, Turn: func(ctx context.Context, w *pollLoop, _ time.Time) turnEnd {
		call := pollCall{w: w, ctx: ctx, at: f.clock.Now(), finish: make(chan struct{}), fail: new(atomic.Bool), skip: new(atomic.Bool),
			retry: new(atomic.Int64)}
		f.polls <- call
		<-call.finish
		switch {
		case call.fail.Load():
			return turnEnd{out: pollFailed, retryAfter: time.Duration(call.retry.Load())}
		case call.skip.Load():
			return turnEnd{out: pollSkipped}
		}
		return turnEnd{out: pollOK}
	}}
	for _, o := range opts {
		o(&cfg)
	}
	f.sched = newScheduler(cfg)
	var err error
	f.leases, err = lease.New(lease.Config{Client: rdb, Holder: "me", TTL: schedTTL, Clock: f.clock, LossQuarantine: -1,
		OnChange: func(l *lease.Lease, _, to lease.State) { f.sched.LeaseChanged(l, to) }})
	require.NoError(t, err)
	t.Cleanup(f.sched.Close)
	return f
}

// start acquires a lease for id and starts its worker.
func (f *schedFixture) start(id string) *pollLoop {
	f.t.Helper()
	r := f.leases.Acquire(context.Background(), []string{id})
	require.Len(f.t, r, 1)
	require.NotNil(f.t, r[0].Lease, "acquire %s", id)
	w := &pollLoop{sess: &session.Session{ID: id, Interval: session.Duration(schedInterval)}, lease: r[0].Lease}
	f.sched.Start(w, time.Time{})
	return w
}

// nextPoll waits for the next poll to start.
func (f *schedFixture) nextPoll() pollCall {
	f.t.Helper()
	select {
	case c := <-f.polls:
		return c
	case <-time.After(waitFor):
		f.t.Fatal("no poll started")
		return pollCall{}
	}
}

// stepTimer moves the clock by d, after emptying the channel of the
// scheduler's timer: the fake clock sends on an AfterFunc timer's channel
// (of capacity 1) at every firing and would block at the second one, while
// a real AfterFunc timer has no channel.
func (f *schedFixture) stepTimer(d time.Duration) {
	f.sched.mu.Lock()
	if f.sched.timer != nil {
		select {
		case <-f.sched.timer.C():
		default:
		}
	}
	f.sched.mu.Unlock()
	f.clock.Step(d)
}

// phaseOf reads w's phase and next poll time under the scheduler's lock.
func (f *schedFixture) phaseOf(w *pollLoop) (phase, time.Time) {
	f.sched.mu.Lock()
	defer f.sched.mu.Unlock()
	return w.phase, w.next
}

// waitPhase waits until w is in phase p.
func (f *schedFixture) waitPhase(w *pollLoop, p phase) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { got, _ := f.phaseOf(w); return got == p },
		waitFor, time.Millisecond, "worker %s never reached phase %d", w.sess.ID, p)
}

func requireNoPoll(t *testing.T, f *schedFixture) {
	t.Helper()
	select {
	case c := <-f.polls:
		t.Fatalf("unexpected poll of %s at %v", c.w.sess.ID, c.at)
	default:
	}
}

func requireDone(t *testing.T, s *scheduler, w *pollLoop) {
	t.Helper()
	select {
	case <-s.Exited(w):
	case <-time.After(waitFor):
		t.Fatalf("worker %s did not exit", w.sess.ID)
	}
}

func TestSchedulerPollsOnTheIntervalGrid(t *testing.T) {
	f := newSchedFixture(t)
	t0 := f.clock.Now()
	w := f.start("s1")
	first := f.nextPoll()
	require.Equal(t, t0, first.at, "the first poll starts at once")
	require.NoError(t, first.ctx.Err())
	close(first.finish)

	// Queued for exactly one interval after the first poll was due.
	f.waitPhase(w, queued)
	_, next := f.phaseOf(w)
	require.Equal(t, t0.Add(schedInterval), next)
	f.clock.Step(schedInterval - time.Millisecond)
	_, next = f.phaseOf(w)
	require.Equal(t, t0.Add(schedInterval), next, "nothing moved before the due time")
	requireNoPoll(t, f)
	f.clock.Step(time.Millisecond)
	second := f.nextPoll()
	require.Equal(t, t0.Add(schedInterval), second.at)

	// A poll that overruns its interval is followed at once by the next.
	f.clock.Step(schedInterval + schedInterval/2)
	close(second.finish)
	third := f.nextPoll()
	require.Equal(t, t0.Add(2*schedInterval+schedInterval/2), third.at)
	close(third.finish)
	f.waitPhase(w, queued)
	_, next = f.phaseOf(w)
	require.Equal(t, third.at.Add(schedInterval), next, "the grid restarts at the late poll")
}

func TestSchedulerManySessionsOneTimer(t *testing.T) {
	f := newSchedFixture(t)
	f.polls = make(chan pollCall, 64)
	ws := make([]*pollLoop, 20)
	for i := range ws {
		ws[i] = f.start("s" + string(rune('a'+i)))
	}
	for range ws {
		close(f.nextPoll().finish)
	}
	for _, w := range ws {
		f.waitPhase(w, queued)
	}
	f.clock.Step(schedInterval)
	seen := map[string]bool{}
	for range ws {
		c := f.nextPoll()
		seen[c.w.sess.ID] = true
		close(c.finish)
	}
	require.Len(t, seen, len(ws), "every session polled once per interval")
	requireNoPoll(t, f)
}

func TestSchedulerUncertainLeaseWaitsThenPollsOnRecovery(t *testing.T) {
	f := newSchedFixture(t)
	w := f.start("s1")
	running := f.nextPoll()

	// A failed renewal makes the lease uncertain: the running poll is cancelled.
	f.mr.SetError("LOADING simulated")
	rep := f.leases.RenewAll(context.Background())
	require.Len(t, rep.Uncertain, 1)
	select {
	case <-running.ctx.Done():
	case <-time.After(waitFor):
		t.Fatal("poll context not cancelled when the lease became uncertain")
	}
	close(running.finish)
	f.waitPhase(w, waiting)
	f.clock.Step(schedInterval)
	got, _ := f.phaseOf(w)
	require.Equal(t, waiting, got, "no poll while uncertain")
	requireNoPoll(t, f)

	// Back to Held before the deadline: polls again at once.
	f.mr.SetError("")
	rep = f.leases.RenewAll(context.Background())
	require.Equal(t, 1, rep.Renewed)
	again := f.nextPoll()
	require.Equal(t, f.clock.Now(), again.at)
	require.NoError(t, again.ctx.Err())
	close(again.finish)
}

func TestSchedulerLostLeaseEndsTheLoop(t *testing.T) {
	f := newSchedFixture(t)
	idle := f.start("idle")
	close(f.nextPoll().finish)
	f.waitPhase(idle, queued)
	busy := f.start("busy")
	running := f.nextPoll()

	// Nothing renews: the deadline passes, both leases are lost.
	f.clock.Step(schedTTL)
	requireDone(t, f.sched, idle)
	select {
	case <-running.ctx.Done():
	case <-time.After(waitFor):
		t.Fatal("poll context not cancelled when the lease was lost")
	}
	select {
	case <-f.sched.Exited(busy):
		t.Fatal("a loop ended while its poll was still running")
	default:
	}
	close(running.finish)
	requireDone(t, f.sched, busy)
	ended := append(f.sched.Ended(), f.sched.Ended()...)
	require.ElementsMatch(t, []*pollLoop{idle, busy}, ended)
}

func TestSchedulerStopAndAbort(t *testing.T) {
	f := newSchedFixture(t)

	// Stopping a queued worker ends it at once.
	idle := f.start("idle")
	close(f.nextPoll().finish)
	f.waitPhase(idle, queued)
	f.sched.Stop(idle)
	requireDone(t, f.sched, idle)

	// Stopping a polling worker lets the poll finish under its lease.
	busy := f.start("busy")
	running := f.nextPoll()
	f.sched.Stop(busy)
	require.NoError(t, running.ctx.Err(), "stop does not cancel the running poll")
	select {
	case <-f.sched.Exited(busy):
		t.Fatal("stopped loop ended before its poll returned")
	default:
	}
	f.sched.Abort(busy)
	require.Error(t, running.ctx.Err(), "abort cancels the running poll")
	close(running.finish)
	requireDone(t, f.sched, busy)
	f.clock.Step(2 * schedInterval)
	requireNoPoll(t, f)
	require.Equal(t, lease.Held, busy.lease.State(), "the scheduler never releases; the main loop does")
}

// TestSchedulerLimitsPollsAtOnce: with a limit of 2, a third due poll
// waits for a slot (counted as deferred, then late) and starts the moment
// one returns; a stopped waiting worker exits at once.
func TestSchedulerLimitsPollsAtOnce(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) { c.Limit = 2 })
	a, b := f.start("a"), f.start("b")
	pa, pb := f.nextPoll(), f.nextPoll()
	c := f.start("c")
	f.waitPhase(c, admitting)
	requireNoPoll(t, f)
	d := f.start("d")
	f.waitPhase(d, admitting)
	st := f.sched.Stats(false)
	running, waiting := st.Running, st.Waiting
	require.Equal(t, 2, running)
	require.Equal(t, 2, waiting)
	require.EqualValues(t, 2, st.Deferred)

	f.sched.Stop(d)
	requireDone(t, f.sched, d)
	f.clock.Step(200 * time.Millisecond) // c is late now
	close(pa.finish)
	pc := f.nextPoll()
	require.Equal(t, c, pc.w, "the waiting poll takes the freed slot")
	st = f.sched.Stats(false)
	waiting = st.Waiting
	require.Zero(t, waiting)
	require.EqualValues(t, 1, st.Late, "it started later than a tenth of its interval after it was due")
	close(pb.finish)
	close(pc.finish)
	f.waitPhase(a, queued)
	f.waitPhase(b, queued)
	f.waitPhase(c, queued)
}

// TestSchedulerBacksOffFailingSessions: consecutive failures lengthen the
// wait before the next poll (1, 3, 7 intervals more, with a jitter of up
// to a tenth), capped by maxBackoff; a success resets it.
func TestSchedulerBacksOffFailingSessions(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) { c.MaxBackoff = 5 * schedInterval })
	w := f.start("s")
	fail := func(want time.Duration) {
		t.Helper()
		p := f.nextPoll()
		p.fail.Store(true)
		close(p.finish)
		f.waitPhase(w, queued)
		_, next := f.phaseOf(w)
		got := next.Sub(p.at)
		require.GreaterOrEqual(t, got, schedInterval+want-want/10)
		require.LessOrEqual(t, got, schedInterval+want+want/10)
		for left := got; left > 0; left -= time.Second { // renewing: the waits outlast the TTL
			require.NoError(t, f.leases.RenewAll(context.Background()).Err)
			f.stepTimer(min(left, time.Second))
		}
	}
	fail(schedInterval)
	_, backoff := held(f.sched)
	require.Equal(t, 1, backoff)
	fail(3 * schedInterval)
	fail(5 * schedInterval) // 7 intervals, capped at maxBackoff
	p := f.nextPoll()
	close(p.finish) // a success
	f.waitPhase(w, queued)
	_, next := f.phaseOf(w)
	require.Equal(t, p.at.Add(schedInterval), next, "a success resets the backoff")
	_, backoff = held(f.sched)
	require.Zero(t, backoff)
}

// TestSchedulerCountsOnlyRunningLoops (issue 22 item 12): the leases held
// and the sessions backing off are counted from the loops running now, so
// a loop that ends, stopped for a handoff while it backs off or ended by
// a lost lease, is not counted any more (a counter kept on the side was
// never decremented for the handoff).
func TestSchedulerCountsOnlyRunningLoops(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) { c.MaxBackoff = 5 * schedInterval })
	a, b := f.start("a"), f.start("b")
	for range 2 { // a fails, b succeeds
		p := f.nextPoll()
		p.fail.Store(p.w == a)
		close(p.finish)
	}
	f.waitPhase(a, queued)
	f.waitPhase(b, queued)
	h, backoff := held(f.sched)
	require.Equal(t, [2]int{2, 1}, [2]int{h, backoff}, "held, backing off")

	f.sched.Stop(a) // handed off while backing off
	f.waitPhase(a, exited)
	h, backoff = held(f.sched)
	require.Equal(t, [2]int{1, 0}, [2]int{h, backoff}, "a's loop ended")

	f.mr.Del(keyspace.Space{}.Lease("b")) // b's lease is lost at the next renewal
	require.Len(t, f.leases.RenewAll(context.Background()).Lost, 1)
	f.waitPhase(b, exited)
	h, backoff = held(f.sched)
	require.Equal(t, [2]int{0, 0}, [2]int{h, backoff}, "b's lease was lost")
}

// held returns the scheduler's count of loops under a Held lease and of
// those backing off (Stats with countLoops).
func held(s *scheduler) (held, backoff int) {
	st := s.Stats(true)
	return st.Held, st.Backoff
}

// TestSchedulerNextDue: when a loop's next poll is due after a turn
// (scheduler.nextDue), for each way the turn can end.
func TestSchedulerNextDue(t *testing.T) {
	due := time.Unix(1000, 0)
	const iv = time.Second
	shift := func(string, time.Duration, time.Time) time.Duration { return 10 * time.Millisecond }
	tests := []struct {
		name    string
		align   func(string, time.Duration, time.Time) time.Duration
		end     turnEnd
		backoff time.Duration
		want    time.Time
	}{
		{"polled: one interval after it was due", nil, turnEnd{out: pollOK}, 0, due.Add(iv)},
		{"moved toward its phase by the spread step", shift, turnEnd{out: pollOK}, 0, due.Add(iv + 10*time.Millisecond)},
		{"failed: later by the backoff", shift, turnEnd{out: pollFailed}, 3 * iv, due.Add(4*iv + 10*time.Millisecond)},
		{"cancelled: the next interval", nil, turnEnd{out: pollCancelled}, 0, due.Add(iv)},
		{"stopped before it polled: the due time a successor keeps", shift, turnEnd{out: pollStopped}, 0, due},
		{"the target asked for quiet (Retry-After): not sooner than that after the poll returned", nil,
			turnEnd{out: pollFailed, retryAfter: 10 * iv}, iv, due.Add(iv/2 + 10*iv)},
		{"a Retry-After shorter than the interval changes nothing", nil, turnEnd{out: pollFailed, retryAfter: iv / 10}, 0, due.Add(iv)},
		{"a first poll paced: exactly then", shift, turnEnd{out: pollCancelled, at: due.Add(300 * time.Millisecond), exact: true}, 0,
			due.Add(300 * time.Millisecond)},
		{"deferred to a saved schedule: then, moved by the spread step", shift, turnEnd{out: pollCancelled, at: due.Add(700 * time.Millisecond)}, 0,
			due.Add(710 * time.Millisecond)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler(schedConfig{Clock: clocktesting.NewFakeClock(due), Wake: func() {}, Align: tt.align})
			l := &pollLoop{sess: &session.Session{ID: "a", Interval: session.Duration(iv)}, next: due}
			require.Equal(t, tt.want, s.nextDue(l, tt.end, tt.backoff, due.Add(iv/2)))
		})
	}
}

// TestSchedulerStallGate: a timer that fires more than StallGap late (the
// process was stopped) starts no poll and asks for a round; the poll
// starts when a round begun after the stall resumes the gate (a round
// begun before it does not), or when the hold runs out.
func TestSchedulerStallGate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resume func(f *schedFixture, before, after uint64)
	}{
		{"a round after the stall", func(f *schedFixture, before, after uint64) {
			f.sched.Resume(before) // a round begun before the stall
			requireNoPoll(t, f)
			f.sched.Resume(after)
		}},
		{"the hold runs out", func(f *schedFixture, _, _ uint64) {
			f.stepTimer(time.Second)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var woke atomic.Int64
			f := newSchedFixture(t, func(c *schedConfig) {
				c.StallGap, c.StallHold, c.Wake = 750*time.Millisecond, time.Second, func() { woke.Add(1) }
			})
			w := f.start("s1")
			first := f.nextPoll()
			close(first.finish)
			f.waitPhase(w, queued)
			before := f.sched.GateEpoch()

			f.stepTimer(schedInterval / 2)
			require.Equal(t, 1, f.leases.RenewAll(context.Background()).Renewed)
			f.stepTimer(schedInterval + schedInterval/3) // due at 1 s, fired at 1.83 s
			f.waitPhase(w, waiting)
			requireNoPoll(t, f)
			require.Positive(t, woke.Load(), "no round asked for")
			after := f.sched.GateEpoch()
			require.Greater(t, after, before)
			require.Equal(t, int64(1), f.sched.Stats(false).Stalls)

			tc.resume(f, before, after)
			again := f.nextPoll()
			require.NoError(t, again.ctx.Err())
			f.sched.Stop(w)
			close(again.finish)
			requireDone(t, f.sched, w)
		})
	}
}

// TestStallsLoggedOncePerMinute: the first stall is logged at warn level,
// then one per stallLogEvery with the count logged at debug level since;
// every stall is counted.
func TestStallsLoggedOncePerMinute(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 15, 0, 0, 0, time.UTC)
	type want struct {
		warn  bool
		since int64
	}
	tests := []struct {
		name string
		at   []time.Duration // stalls, from t0
		want []want
	}{
		{"one", []time.Duration{0}, []want{{true, 0}}},
		{"apart", []time.Duration{0, time.Minute, 3 * time.Minute}, []want{{true, 0}, {true, 0}, {true, 0}}},
		{"a starved worker", []time.Duration{0, 3 * time.Second, 6 * time.Second, 59 * time.Second, 61 * time.Second, 62 * time.Second},
			[]want{{true, 0}, {false, 0}, {false, 0}, {false, 0}, {true, 3}, {false, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g stallGate
			for i, at := range tt.at {
				warn, since := g.noteStall(t0.Add(at))
				require.Equal(t, tt.want[i], want{warn, since}, "stall %d at %v", i, at)
			}
			require.Equal(t, int64(len(tt.at)), g.stalls)
		})
	}
}

// TestSchedulerOnTimeNoGate: a timer that fires within StallGap starts
// its poll as usual.
func TestSchedulerOnTimeNoGate(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) { c.StallGap = 750 * time.Millisecond })
	w := f.start("s1")
	first := f.nextPoll()
	close(first.finish)
	f.waitPhase(w, queued)
	f.stepTimer(schedInterval + schedInterval/2) // 500 ms late
	second := f.nextPoll()
	require.Zero(t, f.sched.GateEpoch())
	require.Zero(t, f.sched.Stats(false).Stalls)
	f.sched.Stop(w)
	close(second.finish)
	requireDone(t, f.sched, w)
}

// TestSchedulerPollsOnceAfterAStall: a timer that fires more than an
// interval late (the process was stopped) polls an interval session once,
// and its next poll is due an interval later, not at once again.
func TestSchedulerPollsOnceAfterAStall(t *testing.T) {
	f := newSchedFixture(t)
	w := f.start("s1")
	first := f.nextPoll()
	close(first.finish)
	f.waitPhase(w, queued)
	require.Equal(t, 1, f.leases.RenewAll(context.Background()).Renewed)

	f.stepTimer(schedInterval * 5 / 2) // due at 1 s, fired at 2.5 s
	late := f.nextPoll()
	close(late.finish)
	f.waitPhase(w, queued)
	_, next := f.phaseOf(w)
	require.Equal(t, late.at.Add(schedInterval), next, "due again at once after the late poll: polled twice back to back")
	requireNoPoll(t, f)
	f.sched.Stop(w)
	requireDone(t, f.sched, w)
}

// TestSchedulerGateHeldPollsOnce: a poll the stall gate held for more than
// an interval polls once when the gate opens, its next an interval later.
func TestSchedulerGateHeldPollsOnce(t *testing.T) {
	f := newSchedFixture(t, func(c *schedConfig) { c.StallGap, c.StallHold = 750*time.Millisecond, time.Minute })
	w := f.start("s1")
	first := f.nextPoll()
	close(first.finish)
	f.waitPhase(w, queued)
	f.stepTimer(schedInterval / 2)
	require.Equal(t, 1, f.leases.RenewAll(context.Background()).Renewed)
	f.stepTimer(schedInterval + schedInterval/3) // due at 1 s, fired at 1.83 s: held
	f.waitPhase(w, waiting)
	require.Equal(t, 1, f.leases.RenewAll(context.Background()).Renewed)
	f.stepTimer(2 * schedInterval) // held 2 s, twice its interval

	f.sched.Resume(f.sched.GateEpoch())
	late := f.nextPoll()
	close(late.finish)
	f.waitPhase(w, queued)
	_, next := f.phaseOf(w)
	require.Equal(t, late.at.Add(schedInterval), next, "due again at once after the held poll: polled twice back to back")
	requireNoPoll(t, f)
	f.sched.Stop(w)
	requireDone(t, f.sched, w)
}
