package poller

import (
	"time"

	"go.uber.org/zap"
)

// A worker stopped (SIGSTOP, a VM paused, a stop-the-world stall) may
// wake with polls overdue under leases still valid, and with a change
// waiting unread in its subscription: a session paused or removed while
// it was stopped. Its timers fire before its main loop reads the change,
// and it would poll the session once or twice more, seconds after the
// command returned (rule 7; seen: 1.5 s after `sessions rm`, a 2 s stop).
// So a timer that fires more than stallGap late closes the stall gate: no
// poll starts until a round begun after it has read the sessions again
// (Resume), or, should no round succeed (Redis unreadable), until
// stallHold has passed. A stall shorter than stallGap needs no gate: a
// poll after it starts within that of any command that returned during it.
//
// A worker starved of CPU for long may stall every few seconds: the first
// stall, and then one a minute (stallLogEvery), is logged at warn level
// with the number since the last one; the rest at debug level.
// PollStats.Stalls counts them all.
const (
	stallGap      = 750 * time.Millisecond
	stallHold     = 5 * time.Second
	stallLogEvery = time.Minute
)

// stallGate holds the polls due while the scheduler waits for a fresh
// read of the sessions after a stall.
type stallGate struct {
	closed bool
	epoch  uint64      // bumped by each close: a round begun before it opens nothing
	held   []*pollLoop // loops due while closed, in phase waiting

	stalls   int64     // times closed since start
	warned   time.Time // when a stall was last logged at warn level
	unwarned int64     // stalls since then logged at debug level
	loud     bool      // this close was logged at warn level, and so is its opening
}

// noteStall says whether the stall the gate closes for at now is logged
// at warn level (the first, then one per stallLogEvery), and how many
// were not since the last one that was.
func (g *stallGate) noteStall(now time.Time) (warn bool, since int64) {
	g.stalls++
	if !g.warned.IsZero() && now.Sub(g.warned) < stallLogEvery {
		g.unwarned++
		return false, 0
	}
	since, g.warned, g.unwarned = g.unwarned, now, 0
	return true, since
}

// closeGateLocked closes the gate after a timer fired late by late, asks
// for a round (Wake), and opens it at the latest after the hold.
func (s *scheduler) closeGateLocked(late time.Duration) {
	s.gate.epoch++
	epoch := s.gate.epoch
	if !s.gate.closed {
		s.gate.closed = true
		warn, since := s.gate.noteStall(s.cfg.Clock.Now())
		s.gate.loud = warn
		if s.cfg.Log != nil {
			const msg = "this worker was stopped or starved: no poll starts until the sessions are read again, so that none paused or removed meanwhile is polled"
			fields := []zap.Field{zap.Duration("late", late), zap.Int64("stalls", s.gate.stalls)}
			if !warn {
				s.cfg.Log.Debug(msg, fields...)
			} else {
				if since > 0 {
					fields = append(fields, zap.Int64("stalls_logged_at_debug_since_last_warning", since))
				}
				s.cfg.Log.Warn(msg, fields...)
			}
		}
	}
	hold := s.cfg.StallHold
	if hold <= 0 {
		hold = stallHold
	}
	resume := func() { s.Resume(epoch) }
	if s.ownGoroutine {
		s.cfg.Clock.AfterFunc(hold, resume)
	} else {
		s.cfg.Clock.AfterFunc(hold, func() { go resume() }) // fake clocks call it under their lock (armLocked)
	}
	if s.cfg.Wake != nil {
		s.cfg.Wake()
	}
}

// holdLocked keeps w, due, from polling while the gate is closed, and
// reports whether it did.
func (s *scheduler) holdLocked(w *pollLoop) bool {
	if !s.gate.closed {
		return false
	}
	w.phase = waiting
	s.gate.held = append(s.gate.held, w)
	return true
}

// GateEpoch is the stall gate's epoch now: a round takes it before it
// reads, and passes it to Resume after.
func (s *scheduler) GateEpoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gate.epoch
}

// Resume opens the stall gate closed at epoch (not one closed since) and
// settles the polls it held: the round that read the sessions after the
// stall has stopped the loops of those paused or removed.
func (s *scheduler) Resume(epoch uint64) {
	s.mu.Lock()
	if !s.gate.closed || epoch != s.gate.epoch {
		s.mu.Unlock()
		return
	}
	s.gate.closed = false
	held, loud := s.gate.held, s.gate.loud
	s.gate.held = nil
	if s.done {
		s.mu.Unlock()
		return // closed: nothing starts any more
	}
	now := s.cfg.Clock.Now()
	var launch []*pollLoop
	for _, w := range held {
		// catchUp: held past an interval, it polls once now, not twice.
		if w.phase == waiting && s.settleLocked(w, now, s.catchUp(w, now)) {
			launch = append(launch, w)
		}
	}
	s.mu.Unlock()
	if s.cfg.Log != nil {
		const msg = "sessions read after the stall: polls start again"
		if loud {
			s.cfg.Log.Info(msg, zap.Int("held", len(held)))
		} else {
			s.cfg.Log.Debug(msg, zap.Int("held", len(held)))
		}
	}
	s.launchAll(launch)
}
