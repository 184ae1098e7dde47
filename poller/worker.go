package poller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// worker is the poll loop of one owned session, run by the scheduler.
//
// Stopping a worker (handoff, session paused or removed, shutdown) only
// ends its loop: a poll already running finishes under its lease, which is
// still renewed, and the lease is released after the loop has exited, so a
// successor never starts while this worker's request may still be served
// downstream. Aborting cancels the running poll too; the lease term ending
// (uncertain, lost) always does.
type worker struct {
	sess  *session.Session // shared with view.sessions while the same; never changed in place
	lease *lease.Lease
	state *State    // the session's state, for a StatefulPoller; nil otherwise
	slots *slotLoop // the slots of a scheduled session; nil for one polled on an interval
	// done is closed when the loop has exited and no poll runs; made on
	// the first scheduler.exited call (most loops are never waited for).
	// Guarded by scheduler.mu.
	done chan struct{}
	// Set by the main loop only.
	stopping  bool             // stopWorker was called; release when done
	restartAs *session.Session // start again with this definition when done (unless stopping)
	members   uint64           // membership version when the loop started
	polled    *atomic.Bool     // a poll began under this lease (shared by a restarted loop)

	// Guarded by scheduler.mu.
	phase         phase
	exact         bool      // the next settling keeps w.next + interval exactly, without the spread step (paceFirst)
	index         int       // position in the scheduler's queue while queued
	next          time.Time // when the next (or running) poll is due
	stopRequested bool
	failures      int                // consecutive failed polls (backoff)
	retryAfter    time.Duration      // set by the poll's goroutine before polled, which reads it: RetryAfterError
	group         *pollGroup         // the group of its polls (GroupLimiter); nil when none
	began         int64              // Unix ns when the running (or last) poll began on its runner
	expect        int64              // Unix ns when the next poll would begin if the worker kept up; 0 unknown (the meter's lateness)
	ctx           context.Context    // of the running poll: cancelled when the lease term ends (pollContext)
	cancel        context.CancelFunc // cancels ctx
}

// startWorker starts the poll loop of s under l. Its first poll is now
// (paced when many start together: scheduler.paceLocked), unless l was
// handed over gracefully by a holder whose next poll of s was due later:
// then it keeps that schedule, so a handoff never polls a session early.
func (c *Coordinator) startWorker(s *session.Session, l *lease.Lease) {
	c.startWorkerAt(s, l, new(atomic.Bool))
}

// startWorkerAt starts the poll loop of s under l; polled says whether a
// poll already began under l (a loop restarted for a new definition).
func (c *Coordinator) startWorkerAt(s *session.Session, l *lease.Lease, polled *atomic.Bool) {
	w := &worker{sess: s, lease: l, members: c.view.members.Version, polled: polled}
	if c.stateful() != nil {
		w.state = &State{store: c.cfg.StateStore, lease: l}
	}
	bound := FirstPollBound(s.Interval.D())
	if s.Scheduled() {
		w.slots, bound = c.newSlotLoop(s, l)
	}
	// Zero without a handoff: the first poll is paced (scheduler.paceLocked).
	due, _ := l.NextPollWithin(bound)
	if polled.Load() || (due.IsZero() && w.state != nil) {
		// A restart polls with the new definition at once; a stateful
		// loop loads its state first and is paced then (scheduler.paceFirst, from prepareState).
		due = c.cfg.Clock.Now()
	}
	c.sched.start(w, due) // and sched.workers[s.ID] = w
}

// FirstPollBound is how long after an acquisition of a session polled
// every interval its first poll may wait to keep the previous holder's
// schedule (the handoff mark): one interval and the spread step, as far
// ahead as a holder's next poll is unless it backs off (a new holder
// starts its backoff afresh).
func FirstPollBound(interval time.Duration) time.Duration {
	return interval + min(interval/10, maxSpreadStep)
}

// handoff is what a successor of w's lease is told: the lease to release,
// and when w's next poll was due.
func (c *Coordinator) handoff(w *worker) lease.Handoff {
	return lease.Handoff{Lease: w.lease, NextPoll: c.sched.nextDue(w)}
}

// stopWorker ends w's loop after its current poll; the main loop releases
// the lease when the loop has exited (reapWorkers).
func (c *Coordinator) stopWorker(w *worker) {
	w.stopping = true
	w.restartAs = nil // a pending restart gives way: the lease is released
	c.sched.stop(w)
}

// runPoll runs one poll of w, under the context the scheduler made for it
// (cancelled when the lease term ends: pollContext), and hands w back to
// the scheduler.
func (c *Coordinator) runPoll(w *worker) {
	out := pollCancelled // no poll ran
	defer func() { c.sched.polled(w, out) }()
	l := w.lease
	now := c.cfg.Clock.Now()
	// The term may have ended, or the deadline passed, since settleLocked
	// made w.ctx on the scheduler's goroutine.
	if w.ctx.Err() != nil || !now.Before(l.Deadline()) {
		return
	}
	// Nor does a poll start once its loop was stopped (the session paused,
	// removed or moving on), though it was due and launched before.
	if c.sched.stopRequestedFor(w) {
		out = pollStopped
		return
	}
	if w.state != nil {
		pollNow, loadFailed := c.prepareState(w, now)
		if !pollNow {
			if loadFailed {
				out = pollFailed
			}
			return
		}
		w.state.mu.Lock()
		w.state.polledAt = c.sched.nextDue(w) // the due time: a successor keeps to it + the interval
		w.state.mu.Unlock()
		if c.sched.stopRequestedFor(w) { // stopped while the state loaded
			out = pollStopped
			return
		}
	}
	ctx := w.ctx
	if w.slots != nil {
		slot, ok := c.slotTurn(w, now)
		if !ok {
			return // no slot due: the scheduler settles w at the next one
		}
		ctx = context.WithValue(ctx, slotKey{}, slot)
		defer func() { c.slotFinished(w, slot, out) }() // before polled, which runs last
	}
	if first := w.polled.CompareAndSwap(false, true); first {
		if gap, ok := l.HandoffGap(); ok {
			// The time the handoff left the session unpolled beyond its
			// schedule: from the release, or from the poll's due time
			// when the previous holder passed its schedule on.
			from := l.Acquired()
			if due, ok := l.NextPollWithin(FirstPollBound(w.sess.Interval.D())); ok && due.After(from) {
				from, gap = due, 0
			}
			c.cfg.Observer.HandoffGap(gap + now.Sub(from))
		}
	}
	out, w.retryAfter = c.pollOnce(ctx, *w.sess, l, w.state)
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
	defer func() {
		if r := recover(); r != nil {
			outcome = "panic"
			c.health.pollPanics.Add(1)
			c.log.Error("poll panicked", zap.String("session", s.ID), zap.Any("panic", r),
				zap.ByteString("stack", debug.Stack()))
			out = pollFailed
		}
		c.cfg.Observer.PollDone(c.cfg.Clock.Since(started), outcome)
	}()
	var err error
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
	for _, w := range c.sched.workers {
		c.stopWorker(w)
	}
	var exited []lease.Handoff
	// wait collects every loop that has exited, waiting for each until ctx
	// is done; after that it only collects those that are done already, so
	// one stuck poll never hides the others.
	wait := func(ctx context.Context) {
		for id, w := range c.sched.workers {
			done := c.sched.exited(w)
			select {
			case <-done:
			default:
				select {
				case <-done:
				case <-ctx.Done():
					continue
				}
			}
			exited = append(exited, c.handoff(w))
			c.sched.forget(id, w)
		}
	}
	wait(ctx)
	if len(c.sched.workers) == 0 {
		return exited
	}
	for _, w := range c.sched.workers {
		c.sched.abort(w)
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
	c.publish(ctx, ev)
	return nil
}
