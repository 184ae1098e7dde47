package poller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/schedule"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// turns runs the turns of the held sessions' poll loops, for the
// scheduler's runners (schedConfig.Turn), many at once: one poll path
// that reads top to bottom (turn: the state loaded, the slot decided, the
// poll, its outcome counted). It holds what a turn needs, set by New and
// never changed (sched once the scheduler is made), and no state of its
// own: a loop's state is in its pollLoop.
type turns struct {
	poller   Poller
	stateful bool         // Config.Stateful: each loop has a SessionState, loaded before its first poll
	states   *state.Store // Config.StateStore: the sessions' state and slots; nil when none
	sched    *scheduler   // whether a loop is stopping, its failures, the pace of first polls
	clock    clock.WithTickerAndDelayedExecution
	timeout  time.Duration // Config.RequestTimeout
	tracing  *tracing      // nil without a TracerProvider
	obs      Observer
	log      *zap.Logger
	health   *health  // the poll counters
	bad      *badData // corrupt states, reported once
	leases   *lease.Manager
}

// notHeld ends l at once when a write fenced by it found its key holding
// another owner value or none (state.ErrNotHeld): its poll is cancelled
// and the session looked at again now, not at the next renewal, which
// would find the same (a Redis that lost its data, say). Other errors
// prove nothing and change nothing.
func (t *turns) notHeld(l *lease.Lease, err error) {
	if t.leases == nil || !errors.Is(err, state.ErrNotHeld) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	t.leases.NotHeld(ctx, l, "a write fenced by the lease found it held by another owner value, or missing")
}

// turn is one turn of l's poll loop, which the scheduler runs once its
// poll is due and admitted (schedConfig.Turn), top to bottom: nothing when
// the lease term ended or the loop was asked to stop since; the state
// loaded (with Config.Stateful, before the first poll under the lease:
// prepareState, which may put the poll later); the poll (pollOnce). The
// scheduler then records the outcome and says when the next turn is due
// (scheduler.record, nextDue).
func (t *turns) turn(ctx context.Context, l *pollLoop, due time.Time) (end turnEnd) {
	now := t.clock.Now()
	// The term may have ended, or the deadline passed, since the scheduler
	// made ctx.
	if ctx.Err() != nil || !now.Before(l.lease.Deadline()) {
		return turnEnd{out: pollCancelled}
	}
	// Nor does a poll start once its loop was stopped (the session paused,
	// removed or moving on), though it was due and launched before.
	if t.sched.Stopping(l) {
		return turnEnd{out: pollStopped}
	}
	if l.state != nil {
		end, pollNow := t.prepareState(ctx, l, now)
		if !pollNow {
			return end
		}
		l.state.mu.Lock()
		l.state.polledAt = due // a successor keeps to it + the interval
		l.state.mu.Unlock()
		if t.sched.Stopping(l) { // stopped while the state loaded
			return turnEnd{out: pollStopped}
		}
	}
	if l.slots != nil {
		slot, ok := t.slotTurn(ctx, l, now)
		if !ok {
			return turnEnd{out: pollCancelled} // no slot due: the scheduler settles l at the next one
		}
		ctx = context.WithValue(ctx, slotKey{}, slot)
		defer func() { t.slotFinished(l, slot, end.out) }() // before record, which runs after the turn
	}
	if first := l.polled.CompareAndSwap(false, true); first {
		t.noteHandoffGap(l, now)
	}
	if tr := t.tracing; tr != nil {
		// The poll's span: the Poller runs in it; pollOnce ends it.
		ctx, _ = tr.startPoll(ctx, l.sess.ID, l.lease.Token(), t.sched.Failures(l)+1)
	}
	out, retry := t.pollOnce(ctx, &Turn{sess: l.sess, lease: l.lease, state: l.state})
	return turnEnd{out: out, retryAfter: retry}
}

// prepareState loads l's state before its first poll under its lease, and
// reports whether l polls now; if not, end is how its turn ends. After a
// crash (no graceful handoff mark, so the lease does not say when the next
// poll was due) a saved record whose poll was due less than an interval
// ago puts the first poll one interval after that due time, on this
// worker's clock, instead of now: the session keeps its schedule (end.at,
// deferSlack earlier, moved by the spread step as the predecessor's
// schedule would have been). Otherwise the first poll is paced
// (scheduler.Pace). A load that fails (a Redis error or timeout) is no
// failure of the target: no backoff, tried again stateLoadRetry later;
// the poller never runs without its state.
// A corrupt state is not a failure: it reads as never saved (the poll goes
// on as for a new session) and is reported once (noteState).
func (t *turns) prepareState(ctx context.Context, l *pollLoop, now time.Time) (end turnEnd, pollNow bool) {
	st := l.state
	st.mu.Lock()
	loaded := st.loaded
	st.mu.Unlock()
	if loaded {
		return turnEnd{}, true
	}
	// The loops of sessions taken together load together: their calls
	// are coalesced into LoadMany pipelines.
	rctx, cancel := context.WithTimeout(ctx, t.timeout)
	rec, err := st.store.LoadBatched(rctx, l.sess.ID)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return turnEnd{out: pollCancelled}, false
		}
		t.obs.RedisError("state")
		retry := stateLoadRetry(l.sess.Interval.D())
		t.log.Warn("state load failed; the poll waits for it", zap.String("session", l.sess.ID),
			zap.Duration("retry_in", retry), zap.Error(err))
		// Not the target's failure: no backoff, and the load is tried
		// again soon rather than an interval (and a backoff) later.
		return turnEnd{out: pollCancelled, at: now.Add(retry), exact: true}, false
	}
	t.bad.noteState(l.sess.ID, rec.Corrupt) // a corrupt state reads as never saved
	st.mu.Lock()
	st.loaded = true
	st.setLast(rec)
	st.mu.Unlock()
	if _, handed := l.lease.NextPoll(); handed || l.polled.Load() || l.slots != nil {
		return turnEnd{}, true // the handoff mark, the previous loop or the slots set the schedule
	}
	iv := l.sess.Interval.D()
	if since, ok := rec.SincePolled(); ok && since >= 0 && since < iv {
		// The load's reply arrived just now: the saved poll was due `since` ago.
		if at := t.clock.Now().Add(iv - since); at.After(now) {
			return turnEnd{out: pollCancelled, at: at.Add(-deferSlack)}, false
		}
	}
	at, paceNow := t.sched.Pace(l)
	if paceNow {
		return turnEnd{}, true
	}
	return turnEnd{out: pollCancelled, at: at, exact: true}, false
}

// stateLoadRetry is how soon a state load that failed (a Redis error or
// timeout) is tried again: within the session's interval, at most a
// second later.
func stateLoadRetry(interval time.Duration) time.Duration {
	return max(time.Millisecond, min(interval, time.Second))
}

// deferSlack is how much earlier than the saved schedule a deferred first
// poll is put before the spread step: `at`, carried in ms through Redis,
// is within a millisecond or two of the session's phase when the
// predecessor's due times were on it, and the slack keeps the step from
// taking it one whole step past.
const deferSlack = 5 * time.Millisecond

// noteHandoffGap reports, at the first poll under l's lease, the time the
// handoff left the session unpolled beyond its schedule: from the
// release, or from the poll's due time when the previous holder passed
// its schedule on.
func (t *turns) noteHandoffGap(l *pollLoop, now time.Time) {
	gap, ok := l.lease.HandoffGap()
	if !ok {
		return
	}
	from := l.lease.Acquired()
	if due, ok := l.lease.NextPollWithin(FirstPollBound(l.sess.Interval.D())); ok && due.After(from) {
		from, gap = due, 0
	}
	t.obs.HandoffGap(gap + now.Sub(from))
}

// pollOnce runs one poll (the Poller's Poll with tn) under ctx, which
// ends when the lease term ends or the poll is aborted, and records its
// outcome; a panic is recovered. It reports how the poll ended: failed (an error or
// a panic), cancelled, skipped (an error wrapping ErrNoCapacity: the
// target was not polled, which is no failure) or ok, and how long the
// target asked to be left alone (RetryAfterError; 0 if it did not).
func (t *turns) pollOnce(ctx context.Context, tn *Turn) (out outcome, retry time.Duration) {
	s := tn.sess
	t.health.polls.Add(1)
	started := t.clock.Now()
	outcome := "ok"
	var err error
	if t.tracing != nil {
		// Ends the span turn started, after a panic is recovered below.
		defer func() { endPoll(ctx, trace.SpanFromContext(ctx), err) }()
	}
	defer func() {
		if r := recover(); r != nil {
			outcome = "panic"
			err = fmt.Errorf("poll panicked: %v", r)
			t.health.pollPanics.Add(1)
			t.log.Error("poll panicked", zap.String("session", s.ID), zap.Any("panic", r),
				zap.ByteString("stack", debug.Stack()))
			out = pollFailed
		}
		t.health.whileRunning(func() {
			t.obs.PollDone(PollReport{Session: s.ID, Token: tn.Token(), Duration: t.clock.Since(started), Outcome: outcome})
		})
	}()
	err = t.poller.Poll(ctx, tn)
	var asked *RetryAfterError
	switch {
	case err == nil:
		return pollOK, 0
	case errors.As(err, &asked) && asked.Err == nil:
		return pollOK, max(asked.Delay, 0) // succeeded; the target asked for a pause
	case ctx.Err() != nil:
		outcome = "cancelled"
		out = pollCancelled
	case errors.Is(err, ErrNoCapacity):
		t.log.Debug("poll not sent", zap.String("session", s.ID), zap.Error(err))
		outcome = "no_capacity"
		return pollSkipped, 0
	default:
		outcome = "error"
		out, retry = pollFailed, retryDelay(err)
	}
	t.health.pollErrors.Add(1)
	if ce := t.log.Check(zapcore.DebugLevel, "poll failed"); ce != nil { // no fields built per poll unless logged
		ce.Write(zap.String("session", s.ID), zap.Int64("token", tn.Token()), zap.Error(err))
	}
	return out, retry
}

// newSlotLoop returns the slot loop of the scheduled session s under l,
// and how far ahead of now a handed-over next poll time may be kept: to
// the next slot's start (and a second). A graceful predecessor's next poll
// time is the start of the slot it had not run: the slots before it are
// done.
func (t *turns) newSlotLoop(s *session.Session, l *lease.Lease) (*slotLoop, time.Duration) {
	now := t.clock.Now()
	sl := &slotLoop{policy: s.CatchUpPolicy(), window: s.CatchUpWindowOrDefault(), since: now, report: t.reportSkipped}
	sch, err := s.ParseSchedule()
	if err != nil || sch == nil {
		t.log.Error("session schedule does not parse; not polled", zap.String("session", s.ID), zap.Error(err))
		return sl, 0
	}
	sl.sch = sch
	bound := time.Duration(0)
	if next := sch.Next(now); !next.IsZero() {
		bound = sch.Start(next).Sub(now) + time.Second
	}
	// Only a mark whose slot is still ahead says which slots are done: an
	// overdue one reads as "now" (the acquisition reports how long until
	// it, at least 0), which would pass over every slot due since the
	// release; then the slots the state records finished decide
	// (loadSlots).
	if at, ok := l.NextPoll(); ok && at.After(l.Acquired()) && !at.After(l.Acquired().Add(bound)) {
		// The mark crossed through the Redis clock: allow it 100 ms.
		if prev := sch.Prev(at.Add(-sch.Offset() - 100*time.Millisecond)); !prev.IsZero() {
			sl.through = prev
		}
	}
	return sl, bound
}

// reportSkipped tells the observer of skipped slots.
func (t *turns) reportSkipped(n int, reason string) {
	if n > 0 {
		t.obs.SlotsSkipped(n, reason)
	}
}

// slotTurn decides, at now, which slot w's turn runs (schedule.Decide with
// the session's catch-up policy), records it as started in the session's
// state, and returns it; ok is false when no slot is due (the turn polls
// nothing and w waits for the next). The first turn under a lease reads
// the slots the state records: the last slot finished is where the cursor
// resumes, so a slot started by a holder that crashed before finishing it
// may run again (at least once).
func (t *turns) slotTurn(ctx context.Context, w *pollLoop, now time.Time) (slot time.Time, ok bool) {
	sl := w.slots
	sl.ran = time.Time{}
	if sl.sch == nil {
		sl.wake = now.Add(time.Hour)
		return time.Time{}, false
	}
	if !sl.known {
		if err := t.loadSlots(ctx, w); err != nil {
			sl.wake = now.Add(time.Second)
			return time.Time{}, false
		}
	}
	in := schedule.Input{Now: now, Policy: sl.policy, Window: sl.window}
	if sl.through.IsZero() {
		in.Since = sl.since // nothing known: a session new to the fleet
	}
	d := sl.sch.Decide(schedule.Cursor{Through: sl.through}, in)
	sl.report(d.Skipped, SkipCatchUp)
	sl.before = d.Through
	if !d.Run.IsZero() {
		sl.before = d.Run.Add(-time.Nanosecond) // the slots passed over stay passed over
	}
	sl.through, sl.wake = d.Through, d.Wake
	if sl.wake.IsZero() {
		sl.wake = now.Add(24 * time.Hour) // no slot within five years: look again tomorrow
	}
	if d.Run.IsZero() {
		return time.Time{}, false
	}
	if st := t.states; st != nil {
		rctx, cancel := context.WithTimeout(ctx, t.timeout)
		err := st.SlotStarted(rctx, w.lease, d.Run)
		cancel()
		t.notHeld(w.lease, err)
		switch {
		case errors.Is(err, state.ErrStale) || ctx.Err() != nil:
			return time.Time{}, false // the lease is gone: its loop ends
		case errors.Is(err, state.ErrNotAHash):
			// A bad key of its own: polled anyway, at least once (its
			// record cannot be written until the key is repaired).
			t.log.Warn("could not record the slot started", zap.String("session", w.sess.ID), zap.Time("slot", d.Run), zap.Error(err))
		case err != nil:
			// Not polled: a slot run without its record would run again
			// under the next holder (this worker too, once Redis answers
			// and it takes the lease again). It is decided again in a
			// second, and runs then or under the next holder, late but
			// once.
			t.log.Warn("could not record the slot started; it is not run until it is", zap.String("session", w.sess.ID), zap.Time("slot", d.Run), zap.Error(err))
			sl.through, sl.wake = sl.before, now.Add(time.Second)
			return time.Time{}, false
		}
	}
	t.obs.SlotStarted(now.Sub(sl.sch.Start(d.Run)))
	sl.ran, sl.began = d.Run, now
	return d.Run, true
}

// loadSlots reads the slots w's session's state records into its cursor.
func (t *turns) loadSlots(ctx context.Context, w *pollLoop) error {
	sl := w.slots
	if st := t.states; st != nil {
		rctx, cancel := context.WithTimeout(ctx, t.timeout)
		saved, err := st.LoadSlots(rctx, w.sess.ID)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				t.obs.RedisError("state")
				t.log.Warn("could not read the session's slots; the poll waits for them", zap.String("session", w.sess.ID), zap.Error(err))
			}
			return err
		}
		if saved.Corrupt != "" {
			t.bad.noteState(w.sess.ID, saved.Corrupt)
		}
		switch {
		case !saved.Carried():
			// Removed, paused or resumed, or its schedule changed, since
			// (state.Slots.Cut): new, it runs no slot due before its loop
			// began. A handoff mark says nothing then: it may be the
			// previous schedule's, taken with the lease.
			sl.through = time.Time{}
		case saved.Started.After(saved.Finished):
			t.log.Info("a slot started by a previous holder did not finish: it may run again",
				zap.String("session", w.sess.ID), zap.Time("slot", saved.Started))
			fallthrough
		default:
			if saved.Finished.After(sl.through) {
				sl.through = saved.Finished
			}
		}
	}
	sl.known = true
	return nil
}

// slotFinished records in the session's state that the turn's slot
// finished, and how.
func (t *turns) slotFinished(w *pollLoop, slot time.Time, out outcome) {
	st := t.states
	if st == nil || out == pollCancelled || out == pollStopped {
		return // a poll cut short may not have reached the target: it runs again (at least once)
	}
	text := "ok"
	switch out {
	case pollFailed:
		text = "error"
	case pollSkipped:
		text = "no_capacity"
	}
	// The poll's context may have ended with the lease: the write is
	// fenced, a fresh bounded context only lets it try.
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	err := st.SlotFinished(ctx, w.lease, slot, text)
	t.notHeld(w.lease, err)
	if err != nil && !errors.Is(err, state.ErrStale) {
		t.log.Warn("could not record the slot finished", zap.String("session", w.sess.ID), zap.Time("slot", slot), zap.Error(err))
	}
}
