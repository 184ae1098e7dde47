package poller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// startLoop starts the poll loop of s under l. Its first poll is now
// (paced when many start together: scheduler.paceLocked), unless l was
// handed over gracefully by a holder whose next poll of s was due later:
// then it keeps that schedule, so a handoff never polls a session early.
func (c *Coordinator) startLoop(s *session.Session, l *lease.Lease) {
	c.startLoopAt(s, l, new(atomic.Bool))
}

// startLoopAt starts the poll loop of s under l; polled says whether a
// poll already began under l (a loop restarted for a new definition).
func (c *Coordinator) startLoopAt(s *session.Session, l *lease.Lease, polled *atomic.Bool) {
	pl := &pollLoop{sess: s, lease: l, polled: polled}
	if c.stateful() != nil {
		pl.state = &State{store: c.cfg.StateStore, lease: l}
	}
	bound := FirstPollBound(s.Interval.D())
	if s.Scheduled() {
		pl.slots, bound = c.newSlotLoop(s, l)
	}
	// Zero without a handoff: the first poll is paced (scheduler.paceLocked).
	due, _ := l.NextPollWithin(bound)
	if polled.Load() || (due.IsZero() && pl.state != nil) {
		// A restart polls with the new definition at once; a stateful
		// loop loads its state first and is paced then (scheduler.Pace, from prepareState).
		due = c.cfg.Clock.Now()
	}
	c.held[s.ID] = &hold{loop: pl, sess: s, acquired: l.Acquired(), members: c.view.members.Version}
	c.sched.Start(pl, due)
}

// forgetLoop forgets the held session id whose loop (h) exited.
func (c *Coordinator) forgetLoop(id string, h *hold) {
	if c.held[id] == h {
		delete(c.held, id)
	}
	c.sched.Forget(id, h.loop)
}

// stopLoop ends h's loop after its current poll; the main loop releases
// the lease when the loop has exited (reapLoops).
func (c *Coordinator) stopLoop(h *hold) {
	h.stopping = true
	h.restartAs = nil // a pending restart gives way: the lease is released
	c.sched.Stop(h.loop)
}

// handoff is what a successor of w's lease is told: the lease to release,
// and when w's next poll was due.
func (c *Coordinator) handoff(w *pollLoop) lease.Handoff {
	return lease.Handoff{Lease: w.lease, NextPoll: c.sched.DueOf(w)}
}

// turn is one turn of l's poll loop, which the scheduler runs once its
// poll is due and admitted (schedConfig.Turn), top to bottom: nothing when
// the lease term ended or the loop was asked to stop since; the state
// loaded (a StatefulPoller's, before the first poll under the lease:
// prepareState, which may put the poll later); the poll (pollOnce). The
// scheduler then records the outcome and says when the next turn is due
// (scheduler.record, nextDue).
func (c *Coordinator) turn(ctx context.Context, l *pollLoop, due time.Time) (end turnEnd) {
	now := c.cfg.Clock.Now()
	// The term may have ended, or the deadline passed, since the scheduler
	// made ctx.
	if ctx.Err() != nil || !now.Before(l.lease.Deadline()) {
		return turnEnd{out: pollCancelled}
	}
	// Nor does a poll start once its loop was stopped (the session paused,
	// removed or moving on), though it was due and launched before.
	if c.sched.Stopping(l) {
		return turnEnd{out: pollStopped}
	}
	if l.state != nil {
		end, pollNow := c.prepareState(ctx, l, now)
		if !pollNow {
			return end
		}
		l.state.mu.Lock()
		l.state.polledAt = due // a successor keeps to it + the interval
		l.state.mu.Unlock()
		if c.sched.Stopping(l) { // stopped while the state loaded
			return turnEnd{out: pollStopped}
		}
	}
	if l.slots != nil {
		slot, ok := c.slotTurn(ctx, l, now)
		if !ok {
			return turnEnd{out: pollCancelled} // no slot due: the scheduler settles l at the next one
		}
		ctx = context.WithValue(ctx, slotKey{}, slot)
		defer func() { c.slotFinished(l, slot, end.out) }() // before record, which runs after the turn
	}
	if first := l.polled.CompareAndSwap(false, true); first {
		c.noteHandoffGap(l, now)
	}
	if tr := c.cfg.tracing; tr != nil {
		// The poll's span: the Poller runs in it; pollOnce ends it.
		ctx, _ = tr.startPoll(ctx, l.sess.ID, l.lease.Token(), c.sched.Failures(l)+1)
	}
	out, retry := c.pollOnce(ctx, *l.sess, l.lease, l.state)
	return turnEnd{out: out, retryAfter: retry}
}

// stateful returns the StatefulPoller of c, nil when the Poller is not one.
func (c *Coordinator) stateful() StatefulPoller {
	sp, _ := c.cfg.Poller.(StatefulPoller)
	return sp
}

// prepareState loads l's state before its first poll under its lease, and
// reports whether l polls now; if not, end is how its turn ends. After a
// crash (no graceful handoff mark, so the lease does not say when the next
// poll was due) a saved record whose poll was due less than an interval
// ago puts the first poll one interval after that due time, on this
// worker's clock, instead of now: the session keeps its schedule (end.at,
// deferSlack earlier, moved by the spread step as the predecessor's
// schedule would have been). Otherwise the first poll is paced
// (scheduler.Pace). A load that fails is a failed poll (retried at the
// next one, after the backoff); the poller never runs without its state.
// A corrupt state is not a failure: it reads as never saved (the poll goes
// on as for a new session) and is reported once (noteState).
func (c *Coordinator) prepareState(ctx context.Context, l *pollLoop, now time.Time) (end turnEnd, pollNow bool) {
	st := l.state
	st.mu.Lock()
	loaded := st.loaded
	st.mu.Unlock()
	if loaded {
		return turnEnd{}, true
	}
	// The loops of sessions taken together load together: their calls
	// are coalesced into LoadMany pipelines.
	rctx, cancel := c.requestCtx(ctx)
	rec, err := st.store.LoadBatched(rctx, l.sess.ID)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return turnEnd{out: pollCancelled}, false
		}
		c.cfg.Observer.RedisError("state")
		c.log.Warn("state load failed; the poll waits for it", zap.String("session", l.sess.ID), zap.Error(err))
		return turnEnd{out: pollFailed}, false
	}
	c.bad.noteState(l.sess.ID, rec.Corrupt) // a corrupt state reads as never saved
	st.mu.Lock()
	st.loaded, st.last = true, rec.Compact()
	st.mu.Unlock()
	if _, handed := l.lease.NextPoll(); handed || l.polled.Load() || l.slots != nil {
		return turnEnd{}, true // the handoff mark, the previous loop or the slots set the schedule
	}
	iv := l.sess.Interval.D()
	if since, ok := rec.SincePolled(); ok && since >= 0 && since < iv {
		// The load's reply arrived just now: the saved poll was due `since` ago.
		if at := c.cfg.Clock.Now().Add(iv - since); at.After(now) {
			return turnEnd{out: pollCancelled, at: at.Add(-deferSlack)}, false
		}
	}
	at, paceNow := c.sched.Pace(l)
	if paceNow {
		return turnEnd{}, true
	}
	return turnEnd{out: pollCancelled, at: at, exact: true}, false
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
func (c *Coordinator) noteHandoffGap(l *pollLoop, now time.Time) {
	gap, ok := l.lease.HandoffGap()
	if !ok {
		return
	}
	from := l.lease.Acquired()
	if due, ok := l.lease.NextPollWithin(FirstPollBound(l.sess.Interval.D())); ok && due.After(from) {
		from, gap = due, 0
	}
	c.cfg.Observer.HandoffGap(gap + now.Sub(from))
}

// pollOnce runs one poll under ctx, which ends when the lease term ends or
// the poll is aborted, and records its outcome; a panic is recovered. It
// calls PollState with st when the Poller is a StatefulPoller (st is then
// set), Poll otherwise. It reports how the poll ended: failed (an error or
// a panic), cancelled, skipped (an error wrapping ErrNoCapacity: the
// target was not polled, which is no failure) or ok, and how long the
// target asked to be left alone (RetryAfterError; 0 if it did not).
func (c *Coordinator) pollOnce(ctx context.Context, s session.Session, l *lease.Lease, st *State) (out outcome, retry time.Duration) {
	c.health.polls.Add(1)
	started := c.cfg.Clock.Now()
	outcome := "ok"
	var err error
	if c.cfg.tracing != nil {
		// Ends the span turn started, after a panic is recovered below.
		defer func() { endPoll(ctx, trace.SpanFromContext(ctx), err) }()
	}
	defer func() {
		if r := recover(); r != nil {
			outcome = "panic"
			err = fmt.Errorf("poll panicked: %v", r)
			c.health.pollPanics.Add(1)
			c.log.Error("poll panicked", zap.String("session", s.ID), zap.Any("panic", r),
				zap.ByteString("stack", debug.Stack()))
			out = pollFailed
		}
		c.cfg.Observer.PollDone(c.cfg.Clock.Since(started), outcome)
	}()
	if sp := c.stateful(); sp != nil && st != nil {
		err = sp.PollState(ctx, s, l, st)
	} else {
		err = c.cfg.Poller.Poll(ctx, s, l)
	}
	switch {
	case err == nil:
		return pollOK, 0
	case ctx.Err() != nil:
		outcome = "cancelled"
		out = pollCancelled
	case errors.Is(err, ErrNoCapacity):
		c.log.Debug("poll not sent", zap.String("session", s.ID), zap.Error(err))
		outcome = "no_capacity"
		return pollSkipped, 0
	default:
		outcome = "error"
		out, retry = pollFailed, retryDelay(err)
	}
	c.health.pollErrors.Add(1)
	c.log.Debug("poll failed", zap.String("session", s.ID), zap.Int64("token", l.Token()), zap.Error(err))
	return out, retry
}

// stopAll stops every poll loop and waits for them until ctx is done; then
// it aborts the polls still running and waits for them a little longer. It
// returns the handoffs of the loops that exited, whose polls have
// returned, and forgets those workers.
func (c *Coordinator) stopAll(ctx context.Context) []lease.Handoff {
	for _, h := range c.held {
		c.stopLoop(h)
	}
	var exited []lease.Handoff
	// wait collects every loop that has exited, waiting for each until ctx
	// is done; after that it only collects those that are done already, so
	// one stuck poll never hides the others.
	wait := func(ctx context.Context) {
		for id, h := range c.held {
			done := c.sched.Exited(h.loop)
			select {
			case <-done:
			default:
				select {
				case <-done:
				case <-ctx.Done():
					continue
				}
			}
			exited = append(exited, c.handoff(h.loop))
			c.forgetLoop(id, h)
		}
	}
	wait(ctx)
	if len(c.held) == 0 {
		return exited
	}
	for _, h := range c.held {
		c.sched.Abort(h.loop)
	}
	grace, cancel := context.WithTimeout(context.Background(), abortGrace)
	defer cancel()
	wait(grace)
	return exited
}

// abortGrace is how long a drain waits for aborted polls to return.
const abortGrace = time.Second

// release releases leases whose poll loops have exited, passing their
// poll schedules on, and tells the peers, so that a successor takes over at
// once and polls when the session is due. Many leases go in waves, soonest
// due first (firstReleaseWave, secondReleaseWave, then the rest), each
// announced as it is released: a successor takes the sessions due next
// while the rest are still being released, instead of after the whole
// release (~5 µs of Redis time a lease). Each wave has waveTimeout of its
// own. It returns how many leases the waves that succeeded released (a
// wave that failed counts none, though some of its leases may be released
// in Redis; the others expire by their TTL).
func (c *Coordinator) release(ctx context.Context, hs []lease.Handoff, waveTimeout time.Duration) (released int, err error) {
	slices.SortFunc(hs, func(a, b lease.Handoff) int { return a.NextPoll.Compare(b.NextPoll) }) // unknown (zero) first
	var errs []error
	for wave := 0; len(hs) > 0; wave++ {
		n := len(hs)
		switch wave {
		case 0:
			n = min(n, firstReleaseWave)
		case 1:
			n = min(n, secondReleaseWave)
		}
		wctx, cancel := context.WithTimeout(ctx, waveTimeout)
		err := c.releaseWave(wctx, hs[:n])
		cancel()
		if err != nil {
			errs = append(errs, err)
		} else {
			released += n
		}
		hs = hs[n:]
	}
	return released, errors.Join(errs...)
}

// The sizes of the first two waves of a release; the third takes the rest.
const (
	firstReleaseWave  = 256
	secondReleaseWave = 1024
)

// releaseWave releases hs and announces it.
func (c *Coordinator) releaseWave(ctx context.Context, hs []lease.Handoff) error {
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = h.Lease.Session()
	}
	if err := c.leases.HandOff(ctx, hs...); err != nil {
		return fmt.Errorf("release %d leases: %w", len(hs), err)
	}
	ev := nodes.Event{Type: nodes.EventRelease, Node: c.cfg.ID}
	if len(ids) <= 100 {
		ev.Sessions = ids
	}
	c.beat.announce.publish(ctx, ev.Type, ev.Sessions)
	return nil
}
