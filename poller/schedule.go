package poller

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// scheduler runs the poll loops of all owned sessions with one timer: a
// session waits in a heap ordered by its next poll time, and its poll runs
// on one of a few runners (goroutines that run polls one after another, as
// many as run at once). A worker holding 100k idle sessions then costs
// 100k small records, not 100k goroutines, tickers and contexts (which
// dominated a 1M-session cold start).
//
// It is a unit of its own: a schedConfig fixed at construction, one lock
// (mu) over its state and every scheduling field of every pollLoop, and
// an API for its owner: Start, Stop, Abort, LeaseChanged, Ended and
// Forget, Done, Due, Stopping, Stats, Close. One turn of a loop reads top
// to bottom in schedule_turn.go: due (the timer, fire) → admitted
// (settleLocked, takeSlotsLocked: the lease Held, a slot free) → the Turn
// hook (the owner loads the state and polls) → recorded (polled) → next
// due (nextDue).
//
// Each loop is in one phase: queued (in the heap), waiting (its lease is
// Uncertain; a lease change wakes it), groupWaiting or admitting (due,
// waiting for a slot of its group or of the limit), polling, or exited.
// Every poll waiting for a slot waits in a heap by due time: the slot a
// poll frees goes to the poll due earliest (earliest deadline first), so
// that under overload every session slows alike. A loop polls
// only when its lease is Held, its term not ended and its deadline not
// passed; the poll's context is cancelled by the lease term's end
// (pollContext, Lease.AfterTerm), the moment the lease stops being Held.
type scheduler struct {
	cfg schedConfig
	// ownGoroutine says the timer's callback already runs in a goroutine
	// of its own (the real clock's AfterFunc), so fire can run there; fake
	// clocks call it with their lock held.
	ownGoroutine bool
	// quit, closed by Close, ends the idle runners (run).
	quit     chan struct{}
	runMu    sync.Mutex    // guards idle
	idle     []*runner     // runners waiting for a poll, in the order they went idle
	mu       sync.Mutex    // guards everything below and every field of every pollLoop but its immutable ones
	active   int           // polls running
	paceAt   time.Time     // when the next paced first poll may start
	shortest time.Duration // the shortest interval of a loop started; 0 before the first
	admit    dueQueue      // due polls waiting for one of limit's slots, earliest due first (each holds its group's slot)
	waiting  int           // loops in phase admitting or groupWaiting
	groups   map[string]*pollGroup
	freed    []*pollGroup            // groups whose slots were freed while polls wait for them (admitLocked)
	crowded  map[*pollGroup]struct{} // groups with polls waiting for a slot
	stats    schedStats
	meter    pollMeter    // polls due and run over the last behindWindow (behind.go)
	judged   behindReport // the last judgement of the meter
	queue    dueQueue     // queued loops by next poll time
	// loops are the poll loops by session id, for LeaseChanged and
	// Stats; Start and Forget change it. (The owner keeps its own record
	// of what it holds: Coordinator.held.)
	loops map[string]*pollLoop
	timer clock.Timer
	armed time.Time   // when the timer fires; zero when it is not armed
	ended []*pollLoop // exited loops the owner has not collected (Ended)
	done  bool        // Close was called: the timer is not armed again
}

// schedConfig configures a scheduler; it is fixed at construction.
type schedConfig struct {
	Clock clock.WithTickerAndDelayedExecution
	// Turn runs one turn of a loop that is due and admitted, on a runner
	// (a goroutine of the scheduler's): due is when its poll was due, ctx
	// the poll's context (cancelled when the lease term ends, or by
	// Abort). It returns how the turn ended (turnEnd).
	Turn func(ctx context.Context, l *pollLoop, due time.Time) turnEnd
	// Wake tells the owner that a loop exited (Ended has it) or that the
	// judgement of being behind changed.
	Wake func()
	// Align, if set, returns how much later than one interval after its
	// previous poll a loop's next poll should be, to move it toward its
	// phase (spreadStep).
	Align func(id string, interval time.Duration, next time.Time) time.Duration
	// Limit, if positive, bounds the polls running at once; due polls
	// beyond it wait in admit, earliest due first.
	Limit int
	// GroupOf, if set, returns the group of a session's polls and how many
	// of them may run at once (GroupLimiter); due polls of a full group
	// wait in its heap, earliest due first.
	GroupOf func(s *session.Session) (name string, max int)
	// MaxBackoff, if positive, lets a session whose polls fail wait
	// longer between polls (backoffLocked).
	MaxBackoff time.Duration
	// Pace paces the first polls of loops started without a schedule to
	// keep (paceLocked).
	Pace bool
	// Slack, if positive, is how late the timer may fire after the
	// earliest queued poll is due, at most a hundredth of the shortest
	// interval started, so that polls due close together start in one
	// firing (TimerSlack).
	Slack time.Duration
}

// pollLoop is the scheduler's record of the poll loop of one held
// session. sess, lease, state and polled are set before Start and never
// change; every other field is guarded by scheduler.mu.
//
// Stopping a loop (handoff, session paused or removed, shutdown) only
// ends its loop: a poll already running finishes under its lease, which is
// still renewed, and the lease is released after the loop has exited, so a
// successor never starts while this loop's request may still be served
// downstream. Aborting cancels the running poll too; the lease term ending
// (uncertain, lost) always does.
type pollLoop struct {
	sess   *session.Session // shared with view.sessions while the same; never changed in place
	lease  *lease.Lease
	state  *State       // the session's state, for a StatefulPoller; nil otherwise
	polled *atomic.Bool // a poll began under this lease (shared by a restarted loop)

	// Guarded by scheduler.mu.
	done          chan struct{} // closed when the loop has exited and no poll runs; made by the first Done (most loops are never waited for)
	phase         phase
	index         int       // position in the scheduler's queue while queued
	next          time.Time // when the next (or running) poll is due
	stopRequested bool
	failures      int                // consecutive failed polls (backoff)
	group         *pollGroup         // the group of its polls (GroupLimiter); nil when none
	expect        int64              // Unix ns when the next poll would begin if the worker kept up; 0 unknown (the meter's lateness)
	ctx           context.Context    // of the running poll: cancelled when the lease term ends (pollContext)
	cancel        context.CancelFunc // cancels ctx
}

// phase is where a loop stands in the scheduler.
type phase uint8

const (
	queued       phase = iota // in the heap, waiting for its next poll time
	waiting                   // lease Uncertain (or Held past its deadline): a lease change wakes it
	admitting                 // due, holding its group's slot, waiting for one of the limit's slots
	polling                   // a poll runs
	exited                    // done is closed
	groupWaiting              // due, waiting for a slot of its group (GroupLimiter)
)

// outcome is how a poll ended, for the scheduler.
type outcome uint8

const (
	pollOK        outcome = iota // the target answered (or the poll returned nil)
	pollFailed                   // an error or a panic: counts toward backoff
	pollCancelled                // cut short by the lease term's end or an abort
	pollSkipped                  // not sent for want of a local resource (ErrNoCapacity): no failure, no backoff
	pollStopped                  // not started: its loop was asked to stop since it was launched
)

// turnEnd is how a turn ended, as the Turn hook reports it.
type turnEnd struct {
	out outcome
	// at, if set, is when the loop's next poll is due instead of one
	// interval after this turn's due time: a first poll paced (Pace) or
	// deferred to the schedule a saved state gives. With exact, the spread
	// step does not move it.
	at    time.Time
	exact bool
	// retryAfter is how long after the poll returned the target asked to
	// be left alone (RetryAfterError): the next poll is not sooner.
	retryAfter time.Duration
}

// schedStats counts what the scheduler did since start.
type schedStats struct {
	Deferred int64        // polls that waited for a slot (of the limit or of their group)
	Late     int64        // polls that started later than a tenth of their interval after they were due
	Skipped  int64        // polls the Poller did not send for want of a local resource (ErrNoCapacity)
	Behind   behindReport // whether the worker keeps up, and if not why (set by Stats)
	Running  int          // polls running now
	Waiting  int          // polls due and waiting for a slot now
	Held     int          // loops running under a Held lease (Stats with countLoops)
	Backoff  int          // loops backing off after failed polls (Stats with countLoops)
}

// newScheduler returns a scheduler run by cfg.
func newScheduler(cfg schedConfig) *scheduler {
	_, real := cfg.Clock.(clock.RealClock)
	return &scheduler{cfg: cfg, loops: make(map[string]*pollLoop), ownGoroutine: real,
		quit: make(chan struct{}), groups: make(map[string]*pollGroup), crowded: make(map[*pollGroup]struct{})}
}

// TimerSlack is how late a Coordinator may start a poll after it is due
// (scheduler.slack): up to 2 ms (a hundredth of the shortest interval the
// worker has polled, when that is less), and every poll due by then starts
// with it. Measured with one worker polling 1,000 sessions at 1 s, where
// polls come ~1 ms apart, firing once per poll cost about a third more CPU
// per poll than firing once per 2 ms: each firing wakes the process from
// idle (a timer, a thread, the runtime's sysmon). As Linux's timer slack
// and systemd's AccuracySec do, it trades a little punctuality for fewer
// wake-ups; polls still keep to their grid (the next is due one interval
// after this one was due, not after it started).
const TimerSlack = 2 * time.Millisecond

// Start schedules w's first poll at `at`, or now if that has passed. A
// zero `at` means there is no schedule to keep (the session was not handed
// over): with pace set, the first poll is then paced (paceLocked).
func (s *scheduler) Start(w *pollLoop, at time.Time) {
	s.mu.Lock()
	now := s.cfg.Clock.Now()
	s.loops[w.sess.ID] = w
	if s.cfg.GroupOf != nil && w.group == nil {
		w.group = s.joinGroupLocked(w.sess)
	}
	if iv := w.sess.Interval.D(); s.shortest == 0 || iv < s.shortest {
		s.shortest = iv
	}
	if at.IsZero() && s.cfg.Pace {
		at = s.paceLocked(w, now)
	}
	launch := s.settleLocked(w, now, maxTime(now, at))
	s.mu.Unlock()
	if launch {
		s.launch(w)
	}
}

// Stop ends w's loop: at once if no poll runs, else when the poll returns.
func (s *scheduler) Stop(w *pollLoop) {
	s.mu.Lock()
	w.stopRequested = true
	var launch []*pollLoop
	switch w.phase {
	case queued:
		heap.Remove(&s.queue, w.index)
		s.exitLocked(w)
	case admitting, groupWaiting:
		s.unwaitLocked(w)
		s.exitLocked(w)
		launch = s.admitLocked(s.cfg.Clock.Now())
	case waiting:
		s.exitLocked(w)
	}
	s.mu.Unlock()
	s.launchAll(launch)
}

// Stopping reports whether w's loop was asked to stop (stop).
func (s *scheduler) Stopping(w *pollLoop) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return w.stopRequested
}

// Abort cancels w's running poll, if any.
func (s *scheduler) Abort(w *pollLoop) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.phase == polling && w.cancel != nil {
		w.cancel()
	}
}

// Done returns a channel closed when w's loop has exited and no poll of
// it runs (closed already if it has).
func (s *scheduler) Done(w *pollLoop) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.done == nil {
		w.done = make(chan struct{})
		if w.phase == exited {
			close(w.done)
		}
	}
	return w.done
}

// Ended returns the loops that exited since the last call.
func (s *scheduler) Ended() []*pollLoop {
	s.mu.Lock()
	defer s.mu.Unlock()
	ended := s.ended
	s.ended = nil
	return ended
}

// Forget takes the loop of session id out of loops if it is w (its
// loop exited and was collected). Called by the main loop only.
func (s *scheduler) Forget(id string, w *pollLoop) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loops[id] == w {
		delete(s.loops, id)
	}
}

// LeaseChanged wakes the loop of l: a lost or released lease ends a
// queued or waiting loop at once, a lease back to Held polls at once. A
// running poll is already cancelled with the term; its end settles it.
func (s *scheduler) LeaseChanged(l *lease.Lease, to lease.State) {
	s.mu.Lock()
	w := s.loops[l.Session()]
	if w == nil || w.lease != l || w.phase == polling || w.phase == exited {
		s.mu.Unlock()
		return
	}
	var launch []*pollLoop
	now := s.cfg.Clock.Now()
	switch to {
	case lease.Lost, lease.Released:
		switch w.phase {
		case queued:
			heap.Remove(&s.queue, w.index)
		case admitting, groupWaiting:
			s.unwaitLocked(w)
		}
		s.exitLocked(w)
		launch = s.admitLocked(now)
	case lease.Held:
		if w.phase == waiting {
			// The wait for the lease was no lack of capacity: the meter
			// does not count it as lateness (polled).
			w.expect = 0
			if s.settleLocked(w, now, now) {
				launch = append(launch, w)
			}
		}
	}
	s.mu.Unlock()
	s.launchAll(launch)
}

// Due returns when the exited loop w's next poll was due: the time
// its successor keeps to (its last poll's start + interval, or the time it
// was queued for).
func (s *scheduler) Due(w *pollLoop) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return w.next
}

// Close stops the timer and ends the idle runners; loops still queued stay queued.
func (s *scheduler) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		close(s.quit)
	}
	s.done = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.armed = time.Time{}
}

// Stats returns the scheduler's counters, whether it keeps up (judged
// now), and how many polls run and wait for a slot now; with countLoops,
// also how many loops run under a Held lease and back off (O(loops):
// scrape or status time, not a hot loop).
func (s *scheduler) Stats(countLoops bool) schedStats {
	s.mu.Lock()
	changed := s.judgeLocked(s.cfg.Clock.Now(), true)
	st := s.stats
	st.Behind = s.judged
	st.Running, st.Waiting = s.active, s.waiting
	if countLoops {
		st.Held, st.Backoff = s.holdingLocked()
	}
	s.mu.Unlock()
	if changed {
		s.cfg.Wake()
	}
	return st
}

// holdingLocked counts, now, the poll loops that have not exited and run under a
// Held lease, and those among them backing off after failed polls. It
// reads the loops themselves (O(loops)), so that a loop that ended, by
// whichever path (handed off, lost, stopped, restarted), is never counted:
// counters kept on the side missed the handoff of a loop backing off.
func (s *scheduler) holdingLocked() (held, backoff int) {
	for _, w := range s.loops {
		if w.phase == exited {
			continue
		}
		if w.lease.State() == lease.Held {
			held++
		}
		if w.failures > 0 {
			backoff++
		}
	}
	return held, backoff
}
