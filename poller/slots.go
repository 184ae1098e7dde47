package poller

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/schedule"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// SlotObserver is implemented by an Observer that also measures scheduled
// sessions (session.Session.Schedule); the coordinator calls it when its
// Observer implements it. Methods are called from the poll runners and
// must not block.
type SlotObserver interface {
	// SlotStarted reports a slot's poll starting lateness after the slot's
	// start (its time plus the session's jitter offset).
	SlotStarted(lateness time.Duration)
	// SlotsSkipped counts n slots passed over: reason SkipOverlap (due
	// while the previous poll ran) or SkipCatchUp (missed, and not run by
	// the catch-up policy or outside its window).
	SlotsSkipped(n int, reason string)
}

// The reasons of SlotObserver.SlotsSkipped.
const (
	SkipOverlap = "overlap"
	SkipCatchUp = "catchup"
)

type slotKey struct{}

// SlotOf returns the slot a poll runs for, when its session is scheduled:
// the coordinator puts it in the poll's context. The built-in HTTP poller
// sends it as X-Poll-Slot, so that a target can make each slot's effect
// happen once.
func SlotOf(ctx context.Context) (slot time.Time, ok bool) {
	slot, ok = ctx.Value(slotKey{}).(time.Time)
	return slot, ok
}

// slotLoop is the schedule of a scheduled session's poll loop: the worker's
// next poll time (pollLoop.next) is the start of the next slot to decide,
// and each turn decides with schedule.Decide which slot, if any, runs.
// Its fields are used by the runner of the loop's turn only (runPoll, then
// scheduler.polled, in that goroutine), one turn at a time.
type slotLoop struct {
	sch     *schedule.Schedule // nil when the schedule does not parse (never polled)
	policy  schedule.Policy
	window  time.Duration
	since   time.Time // the loop's start: a session new to the fleet runs no past slot (unless policy all)
	through time.Time // the cursor: slots at or before it were run or skipped
	known   bool      // the saved slots were read (or there is no state store)
	ran     time.Time // the slot the turn's poll ran, zero when it ran none
	before  time.Time // the cursor before that slot: put back when its poll was cut short
	began   time.Time // when that poll began
	wake    time.Time // when to decide again, set by the turn
	report  func(n int, reason string)
}

// newSlotLoop returns the slot loop of the scheduled session s under l,
// and how far ahead of now a handed-over next poll time may be kept: to
// the next slot's start (and a second). A graceful predecessor's next poll
// time is the start of the slot it had not run: the slots before it are
// done.
func (c *Coordinator) newSlotLoop(s *session.Session, l *lease.Lease) (*slotLoop, time.Duration) {
	now := c.cfg.Clock.Now()
	sl := &slotLoop{policy: s.CatchUpPolicy(), window: s.CatchUpWindowOrDefault(), since: now, report: c.reportSkipped}
	sch, err := s.ParseSchedule()
	if err != nil || sch == nil {
		c.log.Error("session schedule does not parse; not polled", zap.String("session", s.ID), zap.Error(err))
		return sl, 0
	}
	sl.sch = sch
	bound := time.Duration(0)
	if next := sch.Next(now); !next.IsZero() {
		bound = sch.Start(next).Sub(now) + time.Second
	}
	if at, ok := l.NextPoll(); ok && !at.After(l.Acquired().Add(bound)) {
		// The mark crossed through the Redis clock: allow it 100 ms.
		if prev := sch.Prev(at.Add(-sch.Offset() - 100*time.Millisecond)); !prev.IsZero() {
			sl.through = prev
		}
	}
	return sl, bound
}

// reportSkipped tells the observer, if it measures slots, of skipped
// slots.
func (c *Coordinator) reportSkipped(n int, reason string) {
	if so, ok := c.cfg.Observer.(SlotObserver); ok && n > 0 {
		so.SlotsSkipped(n, reason)
	}
}

// slotTurn decides, at now, which slot w's turn runs (schedule.Decide with
// the session's catch-up policy), records it as started in the session's
// state, and returns it; ok is false when no slot is due (the turn polls
// nothing and w waits for the next). The first turn under a lease reads
// the slots the state records: the last slot finished is where the cursor
// resumes, so a slot started by a holder that crashed before finishing it
// may run again (at least once).
func (c *Coordinator) slotTurn(ctx context.Context, w *pollLoop, now time.Time) (slot time.Time, ok bool) {
	sl := w.slots
	sl.ran = time.Time{}
	if sl.sch == nil {
		sl.wake = now.Add(time.Hour)
		return time.Time{}, false
	}
	if !sl.known {
		if err := c.loadSlots(ctx, w); err != nil {
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
	if st := c.cfg.StateStore; st != nil {
		rctx, cancel := c.requestCtx(ctx)
		err := st.SlotStarted(rctx, w.lease, d.Run)
		cancel()
		switch {
		case errors.Is(err, state.ErrStale) || ctx.Err() != nil:
			return time.Time{}, false // the lease is gone: its loop ends
		case err != nil:
			// Polled anyway: a successor after a crash may run it again
			// (at least once), where not polling could lose it.
			c.log.Warn("could not record the slot started", zap.String("session", w.sess.ID), zap.Time("slot", d.Run), zap.Error(err))
		}
	}
	if so, ok := c.cfg.Observer.(SlotObserver); ok {
		so.SlotStarted(now.Sub(sl.sch.Start(d.Run)))
	}
	sl.ran, sl.began = d.Run, now
	return d.Run, true
}

// loadSlots reads the slots w's session's state records into its cursor.
func (c *Coordinator) loadSlots(ctx context.Context, w *pollLoop) error {
	sl := w.slots
	if st := c.cfg.StateStore; st != nil {
		rctx, cancel := c.requestCtx(ctx)
		saved, err := st.LoadSlots(rctx, w.sess.ID)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				c.cfg.Observer.RedisError("state")
				c.log.Warn("could not read the session's slots; the poll waits for them", zap.String("session", w.sess.ID), zap.Error(err))
			}
			return err
		}
		if saved.Corrupt != "" {
			c.bad.noteState(w.sess.ID, saved.Corrupt)
		}
		if saved.Started.After(saved.Finished) {
			c.log.Info("a slot started by a previous holder did not finish: it may run again",
				zap.String("session", w.sess.ID), zap.Time("slot", saved.Started))
		}
		if saved.Finished.After(sl.through) {
			sl.through = saved.Finished
		}
	}
	sl.known = true
	return nil
}

// slotFinished records in the session's state that the turn's slot
// finished, and how.
func (c *Coordinator) slotFinished(w *pollLoop, slot time.Time, out outcome) {
	st := c.cfg.StateStore
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
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
	defer cancel()
	if err := st.SlotFinished(ctx, w.lease, slot, text); err != nil && !errors.Is(err, state.ErrStale) {
		c.log.Warn("could not record the slot finished", zap.String("session", w.sess.ID), zap.Time("slot", slot), zap.Error(err))
	}
}

// next returns when w's loop decides again after its turn, at now: at the
// start of the next slot; at once when policy all has missed slots left.
// Slots that came due while the turn's poll ran are skipped (overlap):
// never run beside it, nor late after it. A poll cut short (cancelled:
// its lease ended, or a drain aborted it) leaves its slot undone: the
// cursor goes back before it and the loop's next poll time, which a
// successor keeps, is that slot's start.
func (sl *slotLoop) next(now time.Time, cut bool) time.Time {
	if sl.sch == nil {
		return sl.wake
	}
	if !sl.ran.IsZero() && cut {
		sl.through, sl.wake = sl.before, sl.sch.Start(sl.ran)
		sl.ran = time.Time{}
		return sl.wake
	}
	if !sl.ran.IsZero() {
		pending := sl.sch.Next(sl.through)
		if sl.policy == schedule.All && !pending.IsZero() && !sl.sch.Start(pending).After(sl.began) {
			return now // missed slots due before the poll began: run them in order
		}
		d := sl.sch.Decide(schedule.Cursor{Through: sl.through, Running: true}, schedule.Input{Now: now, Policy: sl.policy, Window: sl.window})
		sl.report(d.Skipped, SkipOverlap)
		sl.through, sl.wake = d.Through, d.Wake
		sl.ran = time.Time{}
		if sl.wake.IsZero() {
			sl.wake = now.Add(24 * time.Hour)
		}
	}
	if sl.wake.IsZero() {
		return now.Add(time.Second) // the turn did not get to decide (a failed state load): try again soon
	}
	return sl.wake
}
