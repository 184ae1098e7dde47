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

type slotKey struct{}

// SlotOf returns the slot a poll runs for, when its session is scheduled:
// the coordinator puts it in the poll's context. The built-in HTTP poller
// sends it as X-Poll-Slot, so that a target can make each slot's effect
// happen once.
func SlotOf(ctx context.Context) (slot time.Time, ok bool) {
	slot, ok = ctx.Value(slotKey{}).(time.Time)
	return slot, ok
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
