package poller

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/hrw"
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
// Forget, Exited, DueOf, Times, Stopping, Pace, Stats, Close. Its records are in
// pollloop.go, its pure timing rules in spread.go, its meter in behind.go.
// One turn of a loop reads top to bottom: due (the timer, fire) →
// admitted (settleLocked, takeSlotsLocked: the lease Held, a slot free) →
// run (launch, run, turn: the owner's Turn hook loads the state and
// polls) → recorded (record) → next due (nextDue).
//
// Each loop is in one phase: queued (in the heap), waiting (its lease is
// Uncertain; a lease change wakes it), groupWaiting or admitting (due,
// waiting for a slot of its group or of the limit), polling, or exited.
// Every poll waiting for a slot waits in a heap: the slot a poll frees
// goes to the poll first in its fair turn (fairKey: the sessions share the
// slots in proportion to their rates), so that under overload every
// session slows alike, by the same factor. A loop polls
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
	admit    dueQueue      // due polls waiting for one of limit's slots, by fair turn (each holds its group's slot)
	waiting  int           // loops in phase admitting or groupWaiting
	groups   map[string]*pollGroup
	freed    []*pollGroup            // groups whose slots were freed while polls wait for them (admitLocked)
	crowded  map[*pollGroup]struct{} // groups with polls waiting for a slot
	stats    schedStats
	meter    pollMeter    // polls due and run over the last behindWindow (behind.go)
	limit    cpuLimit     // how many polls may run at once now: Limit, lower while the CPU is the bound (cpulimit.go)
	judged   behindReport // the last judgement of the meter
	queue    dueQueue     // queued loops by next poll time
	// loops are the poll loops by session id, for LeaseChanged and
	// Stats; Start and Forget change it. (The owner keeps its own record
	// of what it holds: holdings.held.)
	loops map[string]*pollLoop
	timer clock.Timer
	armed time.Time   // when the timer fires; zero when it is not armed
	ended []*pollLoop // exited loops the owner has not collected (Ended)
	done  bool        // Close was called: the timer is not armed again
	gate  stallGate   // closed after a stall until the sessions are read again (stall.go)
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
	// phase (SpreadStep).
	Align func(id string, interval time.Duration, next time.Time) time.Duration
	// Limit, if positive, bounds the polls running at once; due polls
	// beyond it wait in admit for their fair turn (fairKey).
	Limit int
	// CPU, if set with Limit, samples the process's CPU: while it is the
	// bound, fewer polls than Limit run at once (cpuLimit).
	CPU func() cpuSample
	// GroupOf, if set, returns the group of a session's polls and how many
	// of them may run at once (GroupLimiter); due polls of a full group
	// wait in its heap for their fair turn (fairKey).
	GroupOf func(s *session.Session) (name string, max int)
	// MaxBackoff, if positive, lets a session whose polls fail wait
	// longer between polls (backoffLocked).
	MaxBackoff time.Duration
	// Pace paces the first polls of loops started without a schedule to
	// keep (paceLocked).
	Pace bool
	// StallGap, if positive, closes the stall gate (stall.go) when the
	// timer fires later than it; StallHold bounds how long the gate stays
	// closed without a Resume (default stallHold).
	StallGap, StallHold time.Duration
	// Log, if set, receives the stall gate's closing and opening.
	Log *zap.Logger
	// Slack, if positive, is how late the timer may fire after the
	// earliest queued poll is due, at most a hundredth of the shortest
	// interval started, so that polls due close together start in one
	// firing (TimerSlack).
	Slack time.Duration
}

// schedStats counts what the scheduler did since start.
type schedStats struct {
	Deferred   int64        // polls that waited for a slot (of the limit or of their group)
	GroupWaits int64        // polls that waited for a slot of their group (a host's --max-per-host)
	Late       int64        // polls that started later than a tenth of their interval after they were due
	Skipped    int64        // polls the Poller did not send for want of a local resource (ErrNoCapacity)
	Stalls     int64        // times the stall gate closed (stall.go)
	Behind     behindReport // whether the worker keeps up, and if not why (set by Stats)
	Limit      int          // polls that may run at once now (0: no limit)
	Running    int          // polls running now
	Waiting    int          // polls due and waiting for a slot now
	Held       int          // loops running under a Held lease (Stats with countLoops)
	Backoff    int          // loops backing off after failed polls (Stats with countLoops)
}

// newScheduler returns a scheduler run by cfg.
func newScheduler(cfg schedConfig) *scheduler {
	_, real := cfg.Clock.(clock.RealClock)
	return &scheduler{cfg: cfg, loops: make(map[string]*pollLoop), ownGoroutine: real,
		quit: make(chan struct{}), groups: make(map[string]*pollGroup), crowded: make(map[*pollGroup]struct{}),
		limit: newCPULimit(cfg.Limit, runtime.GOMAXPROCS(0))}
}

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
	if iv := w.sess.Interval.D(); iv > 0 && (s.shortest == 0 || iv < s.shortest) {
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
		s.queue.remove(w.index)
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

// Exited returns a channel closed when w's loop has exited and no poll of
// it runs (closed already if it has).
func (s *scheduler) Exited(w *pollLoop) <-chan struct{} {
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
			s.queue.remove(w.index)
		case admitting, groupWaiting:
			s.unwaitLocked(w)
		}
		s.exitLocked(w)
		launch = s.admitLocked(now)
	case lease.Held:
		if w.phase == waiting {
			// The wait for the lease was no lack of capacity: the meter
			// does not count it as lateness (record).
			w.expect = 0
			if s.settleLocked(w, now, now) {
				launch = append(launch, w)
			}
		}
	}
	s.mu.Unlock()
	s.launchAll(launch)
}

// DueOf returns when the exited loop w's next poll was due: the time
// its successor keeps to (its last poll's start + interval, or the time it
// was queued for).
func (s *scheduler) DueOf(w *pollLoop) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return w.next
}

// Times returns when w's next poll is due and when its last poll began
// (zero before the first).
func (s *scheduler) Times(w *pollLoop) (next, lastBegan time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return w.next, w.lastBegan
}

// Pace returns when l's first poll, due now and with no schedule to
// keep, may start (paceLocked), and whether that is now; a turn that may
// not poll yet ends with turnEnd{at: at, exact: true}. Called from l's
// turn.
func (s *scheduler) Pace(l *pollLoop) (at time.Time, now bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.cfg.Clock.Now()
	at = s.paceLocked(l, t)
	return at, !at.After(t)
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
	now := s.cfg.Clock.Now()
	launch := s.adaptLocked(now)
	changed := s.judgeLocked(now, true)
	st := s.stats
	st.Behind = s.judged
	st.Stalls = s.gate.stalls
	st.Running, st.Waiting, st.Limit = s.active, s.waiting, max(0, s.limit.limit())
	if countLoops {
		st.Held, st.Backoff = s.holdingLocked()
	}
	s.mu.Unlock()
	s.launchAll(launch)
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

// launch runs w's turn on a runner: the one that went idle last, if any
// waits, else a new one. Called without s.mu held.
func (s *scheduler) launch(w *pollLoop) {
	s.runMu.Lock()
	if n := len(s.idle); n > 0 {
		r := s.idle[n-1]
		s.idle[n-1] = nil
		s.idle = s.idle[:n-1]
		s.runMu.Unlock()
		r.work <- w
		return
	}
	s.runMu.Unlock()
	go s.run(w)
}

// run is a runner: it runs w's poll, then each poll handed to it while it
// is idle, and exits after runnerIdle without one, or once the scheduler
// is closed. A poll needs a deep stack (HTTP, JSON): a runner grows its
// stack once and keeps it for the polls that follow, where a goroutine
// per poll grows a fresh one every time. The runner idle last is given the
// next poll, so that the runners a burst started and steady polling no
// longer needs stay idle and exit.
func (s *scheduler) run(w *pollLoop) {
	r := &runner{work: make(chan *pollLoop, 1)}
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	for {
		s.turn(w)
		s.runMu.Lock()
		s.idle = append(s.idle, r)
		s.runMu.Unlock()
		idle.Reset(runnerIdle)
		select {
		case w = <-r.work:
			continue
		case <-idle.C:
		case <-s.quit:
		}
		s.runMu.Lock()
		i := slices.Index(s.idle, r) // 0 mostly: runners time out in the order they went idle
		switch {
		case i == 0:
			s.idle[0] = nil
			s.idle = s.idle[1:]
		case i > 0:
			s.idle = slices.Delete(s.idle, i, i+1)
		}
		s.runMu.Unlock()
		if i >= 0 {
			return
		}
		w = <-r.work // a launch took this runner off idle just as it stopped waiting
	}
}

// launchAll launches each of ws (s.launch); called without s.mu held.
func (s *scheduler) launchAll(ws []*pollLoop) {
	for _, w := range ws {
		s.launch(w)
	}
}

// turn runs one turn of l, which is due and admitted (its lease Held, its
// slots taken, its poll context made): the Turn hook loads its state and
// polls, then record records the outcome and queues the next turn.
func (s *scheduler) turn(l *pollLoop) {
	s.mu.Lock()
	ctx, due := l.ctx, l.next
	s.mu.Unlock()
	began := s.cfg.Clock.Now() // when the poll really starts, for the meter
	end := s.cfg.Turn(ctx, l, due)
	s.record(l, end, began)
}

// record records how l's turn, begun at began, ended, and settles l at
// its next due time (nextDue), or at once if the poll overran it. A
// failure counts toward backoff; a poll skipped for want of a local
// resource (ErrNoCapacity) or cancelled neither counts nor resets it. The
// slots freed by the poll go to the polls due earliest among those
// waiting for them, before l.
func (s *scheduler) record(l *pollLoop, end turnEnd, began time.Time) {
	s.mu.Lock()
	now := s.cfg.Clock.Now()
	l.cancel()
	l.ctx, l.cancel = nil, nil
	s.active--
	s.freeGroupSlotLocked(l.group)
	var backoff time.Duration
	switch end.out {
	case pollOK, pollFailed:
		backoff = s.backoffLocked(l, end.out == pollFailed)
	case pollSkipped:
		s.stats.Skipped++
	}
	next := s.nextDue(l, end, backoff, now)
	if end.out != pollStopped {
		for i := range l.fair { // its next turn in the heaps it waited in (fairKey)
			l.fair[i] += int64(next.Sub(l.next))
		}
	}
	if end.out == pollOK || end.out == pollFailed {
		s.meterPolledLocked(l, now, began, next.Sub(l.next))
	}
	if next.Before(now) {
		// Due at once. It takes its place among the waiting polls by when
		// it fell due, and, behind its schedule, by when the poll that
		// just ended began, not by when it ended: how long a poll took
		// (the target's answer, or its wait for a processor among the
		// polls running) does not move the session back, so that under
		// overload polls start in the order their previous polls started
		// and every session's gap between starts is alike.
		l.rankFrom = maxTime(next, began)
		next = now
	}
	l.lastBegan = began
	// The freed slot goes to the polls already waiting first: l, due again
	// at once after a poll that overran its interval, queues behind them
	// rather than keep the slot (which starved the waiting sessions).
	launch := s.admitLocked(now)
	if s.settleLocked(l, now, next) {
		launch = append(launch, l)
	}
	launch = append(launch, s.adaptLocked(now)...)
	changed := s.judgeLocked(now, false)
	s.mu.Unlock()
	s.launchAll(launch)
	if changed {
		s.cfg.Wake() // the owner logs the change (reporter.checkBehind)
	}
}

// nextDue returns when l's next poll is due after a turn that was due at
// l.next, ended with end and returned at now: one interval later, moved
// later by the spread step toward the session's phase (Align) and by
// backoff, and no sooner than the target's Retry-After (end.retryAfter
// after now); or end.at when the turn set it (a paced or deferred first
// poll; exact: not aligned); or l.next again when the turn did not poll
// because the loop was stopped (the due time a successor keeps). This is
// the one place that says when a session is polled next.
func (s *scheduler) nextDue(l *pollLoop, end turnEnd, backoff time.Duration, now time.Time) time.Time {
	if end.out == pollStopped {
		return l.next
	}
	if l.slots != nil {
		return l.slots.next(now, end.out == pollCancelled) // a scheduled session: the next slot's start (slotloop.go)
	}
	iv := l.sess.Interval.D()
	next := l.next.Add(iv)
	if !end.at.IsZero() {
		next = end.at
	}
	if s.cfg.Align != nil && !end.exact {
		next = next.Add(s.cfg.Align(l.sess.ID, iv, next))
	}
	next = next.Add(backoff)
	if at := now.Add(end.retryAfter); end.retryAfter > 0 && at.After(next) {
		next = at // the target's Retry-After (RetryAfterError)
	}
	return next
}

// backoffLocked records the outcome of w's poll and returns how much
// longer than its interval w waits before its next poll: after k
// consecutive failures, (2^min(k,5) - 1) × interval, at most maxBackoff,
// with a jitter of up to a tenth of it (a hash of the session and k, so
// sessions failing together do not retry together); 0 after a success.
func (s *scheduler) backoffLocked(w *pollLoop, failed bool) time.Duration {
	if s.cfg.MaxBackoff <= 0 {
		return 0
	}
	if !failed {
		w.failures = 0
		return 0
	}
	w.failures++
	extra := ErrorBackoff(w.failures, w.sess.Interval.D(), s.cfg.MaxBackoff)
	if extra <= 0 {
		return 0
	}
	jitter := time.Duration(hrw.Bucket(fmt.Sprintf("%s#%d", w.sess.ID, w.failures), 1000)) * extra / 10000
	return extra - extra/10 + 2*jitter
}

// paceLocked returns when w's first poll, which has no schedule to keep,
// starts: the first such poll at once, each next one firstPollGap after
// the one before, so that a worker taking many sessions at once (a cold
// start, a crash takeover) does not send them all in the same instant
// and open a connection per poll to a target; a single session added or
// taken over is polled at once. No first poll is paced later than
// min(interval/2, maxFirstPollDelay): past that, a burst larger than the
// window holds at the pace is spread over the window by a hash of each
// session's id.
func (s *scheduler) paceLocked(w *pollLoop, now time.Time) time.Time {
	window := min(w.sess.Interval.D()/2, maxFirstPollDelay)
	if window <= 0 {
		return now
	}
	if s.paceAt.Before(now) {
		s.paceAt = now
	}
	at := s.paceAt
	if at.Sub(now) >= window {
		return now.Add(time.Duration(hrw.Bucket(w.sess.ID, int(window))))
	}
	s.paceAt = at.Add(firstPollGap)
	return at
}

// fire launches the polls that are due and re-arms the timer.
func (s *scheduler) fire() {
	s.mu.Lock()
	now := s.cfg.Clock.Now()
	if late := now.Sub(s.armed); s.cfg.StallGap > 0 && !s.armed.IsZero() && late > s.cfg.StallGap {
		s.closeGateLocked(late)
	}
	s.armed = time.Time{}
	var launch []*pollLoop
	for s.queue.Len() > 0 && !s.queue.head().next.After(now) {
		w := s.queue.pop()
		if s.settleLocked(w, now, s.catchUp(w, now)) {
			launch = append(launch, w)
		}
	}
	s.armLocked(now) // the head may be a loop not pushed above
	s.mu.Unlock()
	for _, w := range launch {
		s.launch(w)
	}
}

// catchUp is when w's poll, found due at now by a timer firing or by the
// stall gate's Resume, counts as due: its due time, or now when that is
// more than an interval past. A timer that fires that late means the
// process was stopped or starved (polls waiting for a slot wait in the
// heaps, not for the timer), and the gate may hold a poll that long; an
// interval session polls once for it, not twice back to back: the next
// poll is due one interval after its due time (nextDue), which would
// still be past. A scheduled session keeps its slots (slotloop.go).
func (s *scheduler) catchUp(w *pollLoop, now time.Time) time.Time {
	if iv := w.sess.Interval.D(); w.slots == nil && iv > 0 && now.Sub(w.next) > iv {
		return now
	}
	return w.next
}

// settleLocked decides what w, which is neither queued nor polling (nor
// in a heap of waiting polls: the caller took it out), does next, given
// that its next poll is due at `at`: exit (stopped, or its lease lost or
// released), wait (lease uncertain or past its deadline), queue (not due
// yet), wait for a slot (takeSlotsLocked) or poll now, which it reports;
// the caller then runs its turn on a runner (launch).
func (s *scheduler) settleLocked(w *pollLoop, now, at time.Time) bool {
	from := w.phase
	if from == admitting {
		// It gives back its group's slot and takes it again below if it
		// polls now.
		s.unadmitLocked(w)
	}
	w.rank = at
	if from := w.rankFrom; !from.IsZero() && from.Before(at) {
		w.rank = from // record: due at once, ranked by when it fell due
	}
	w.rankFrom = time.Time{}
	if w.stopRequested {
		w.next = at // what a successor keeps (nextDue)
		s.exitLocked(w)
		return false
	}
	switch w.lease.State() {
	case lease.Lost, lease.Released:
		s.exitLocked(w)
		return false
	case lease.Uncertain:
		w.phase = waiting
		return false
	}
	if at.After(now) {
		w.next = at
		w.phase = queued
		s.queue.push(w, now)
		s.armLocked(now)
		return false
	}
	if !now.Before(w.lease.Deadline()) {
		// Its expiry is under way and will report the lease Lost.
		w.phase = waiting
		return false
	}
	w.next = at
	return s.takeSlotsLocked(w, now, from)
}

// takeSlotsLocked starts w's due poll if a slot of its group (if any) and
// one of the limit's are free, and reports it; else w waits, in a heap for
// its fair turn (fairKey), for a slot of its group, or, holding that, for
// one of the limit's. from is the phase w comes from: a poll leaving one
// wait for the next is counted once (Deferred).
func (s *scheduler) takeSlotsLocked(w *pollLoop, now time.Time, from phase) bool {
	if s.holdLocked(w) {
		return false
	}
	waited := from == admitting || from == groupWaiting
	if !s.takeGroupSlotLocked(w, now, from, waited) {
		return false
	}
	if limit := s.limit.limit(); limit > 0 && (s.active >= limit || from != admitting && s.admit.leadsFair(w, admitHeap, now)) {
		// Every slot is taken: wait for one rather than start a poll the
		// worker cannot sustain. A slot that is free while polls wait
		// for one was just freed, and goes to them first, in order
		// (admitLocked): a poll that just took its group's slot does not
		// overtake the polls that wait holding theirs, which starved
		// them when the limit is below the group's bound.
		w.phase = admitting
		s.admit.pushFair(w, admitHeap, now)
		if g := w.group; g != nil {
			g.admitting++
		}
		s.limit.waited = true
		s.waitedLocked(now, waited, s.slotKindLocked())
		return false
	}
	if from != admitting {
		w.fairIn &^= admitHeap // a slot of the limit was free: its next wait for one starts afresh (fairKey)
	}
	ctx, cancel, ok := pollContext(w.lease)
	if !ok {
		// The term ended since State said Held: the change is being
		// reported (leaseChanged), and finds w waiting.
		w.phase = waiting
		s.freeGroupSlotLocked(w.group)
		return false
	}
	if late := now.Sub(w.next); late > max(w.sess.Interval.D()/10, 10*time.Millisecond) {
		s.stats.Late++
	}
	s.active++
	w.phase = polling
	w.ctx, w.cancel = ctx, cancel
	return true
}

// takeGroupSlotLocked takes a slot of w's group (none: nothing to take)
// and reports it, or, the group full, puts w in the group's heap and
// reports false. waited says w's poll already waited for a slot.
func (s *scheduler) takeGroupSlotLocked(w *pollLoop, now time.Time, from phase, waited bool) bool {
	g := w.group
	if g == nil {
		return true
	}
	if g.active >= g.max {
		kind := s.groupWaitKindLocked(g)
		if from != groupWaiting && kind == waitGroup {
			s.stats.GroupWaits++ // the group's own bound holds it, not the limit
		}
		w.phase = groupWaiting
		g.waiting.pushFair(w, groupHeap, now)
		s.crowded[g] = struct{}{}
		s.waitedLocked(now, waited, kind)
		return false
	}
	g.active++
	if !waited {
		w.fairIn &^= groupHeap // its group served it on time: its next wait there starts afresh (fairKey)
	}
	return true
}

// waitedLocked counts a poll that starts waiting for a slot of the given
// kind (once per poll: not again when it already waited).
func (s *scheduler) waitedLocked(now time.Time, already bool, kind waitKind) {
	s.waiting++
	if !already {
		s.stats.Deferred++
		s.meter.waited(now, kind)
	}
}

// admitLocked gives the free slots to the due polls waiting for them,
// first in fair turn (fairKey), and returns those to launch: a group's free slot to
// the group's earliest waiting poll (which then waits for one of the
// limit's slots if none is free), a free slot of the limit to the
// earliest poll waiting for one.
func (s *scheduler) admitLocked(now time.Time) []*pollLoop {
	var launch []*pollLoop
	for {
		for len(s.freed) > 0 {
			g := s.freed[len(s.freed)-1]
			s.freed[len(s.freed)-1] = nil
			s.freed = s.freed[:len(s.freed)-1]
			for g.active < g.max && g.waiting.Len() > 0 {
				w := g.waiting.popFair(groupHeap, now)
				s.waiting--
				if g.waiting.Len() == 0 {
					delete(s.crowded, g)
				}
				if s.settleLocked(w, now, w.next) {
					launch = append(launch, w)
				}
			}
		}
		for s.admit.Len() > 0 && (s.limit.limit() <= 0 || s.active < s.limit.limit()) {
			w := s.admit.popFair(admitHeap, now)
			s.waiting--
			if s.settleLocked(w, now, w.next) {
				launch = append(launch, w)
			}
		}
		if len(s.freed) == 0 {
			return launch
		}
	}
}

// unwaitLocked takes w, waiting for a slot, out of the heap it waits in,
// giving back the group slot it holds while admitting.
func (s *scheduler) unwaitLocked(w *pollLoop) {
	s.waiting--
	switch w.phase {
	case admitting:
		s.admit.remove(w.index)
		s.unadmitLocked(w)
	case groupWaiting:
		g := w.group
		g.waiting.remove(w.index)
		if g.waiting.Len() == 0 {
			delete(s.crowded, g)
		}
	}
}

// unadmitLocked gives back the group slot w held while admitting.
func (s *scheduler) unadmitLocked(w *pollLoop) {
	if g := w.group; g != nil {
		g.admitting--
	}
	s.freeGroupSlotLocked(w.group)
}

// groupWaitKindLocked is what a poll waiting for a slot of g, which is
// full, waits for: g's bound when as many of its polls run, else the
// limit its slots' holders wait for (slotKindLocked).
func (s *scheduler) groupWaitKindLocked(g *pollGroup) waitKind {
	if g.active-g.admitting >= g.max {
		return waitGroup
	}
	return s.slotKindLocked()
}

// freeGroupSlotLocked gives back a slot of g (nil: none), to be taken by
// its earliest waiting poll (admitLocked).
func (s *scheduler) freeGroupSlotLocked(g *pollGroup) {
	if g == nil {
		return
	}
	g.active--
	if g.waiting.Len() > 0 {
		s.freed = append(s.freed, g)
	}
}

// joinGroupLocked returns the group of sess's polls (groupOf), nil when
// they have none, counting one more member in it.
func (s *scheduler) joinGroupLocked(sess *session.Session) *pollGroup {
	name, max := s.cfg.GroupOf(sess)
	if name == "" || max < 1 {
		return nil
	}
	g := s.groups[name]
	if g == nil {
		g = &pollGroup{name: name, max: max}
		s.groups[name] = g
	}
	g.members++
	return g
}

// exitLocked ends w's loop and tells the main loop.
func (s *scheduler) exitLocked(w *pollLoop) {
	w.phase = exited
	if g := w.group; g != nil {
		if g.members--; g.members == 0 {
			delete(s.groups, g.name)
		}
		w.group = nil
	}
	if w.done != nil {
		close(w.done)
	}
	s.ended = append(s.ended, w)
	s.cfg.Wake()
}

// armLocked points the timer at the earliest queued poll, plus the slack.
func (s *scheduler) armLocked(now time.Time) {
	if s.queue.Len() == 0 || s.done {
		return
	}
	at := s.queue.head().next.Add(min(s.cfg.Slack, s.shortest/100))
	if !s.armed.IsZero() && !at.Before(s.armed) {
		return // armed early enough; an early firing re-arms
	}
	s.armed = at
	d := at.Sub(now)
	if s.timer == nil {
		// fire runs in a goroutine of its own: the real clock's AfterFunc
		// gives it one; fake clocks call the callback with their lock held,
		// and fire uses the clock.
		if s.ownGoroutine {
			s.timer = s.cfg.Clock.AfterFunc(d, s.fire)
		} else {
			s.timer = s.cfg.Clock.AfterFunc(d, func() { go s.fire() })
		}
		return
	}
	s.timer.Reset(d)
}

// adaptLocked steps the limit of polls running at once when a step is
// due (cpuLimit.step) and returns the waiting polls a raised limit
// admits, to launch.
func (s *scheduler) adaptLocked(now time.Time) []*pollLoop {
	if s.cfg.CPU == nil || !s.limit.due(now) {
		return nil
	}
	if s.limit.step(now, s.cfg.CPU(), s.active, s.admit.Len() > 0) {
		return s.admitLocked(now)
	}
	return nil
}

// slotKindLocked is what a poll waiting for one of the limit's slots
// waits for: the CPU while it is the bound (cpuLimit.cpuBound), else
// MaxPolls.
func (s *scheduler) slotKindLocked() waitKind {
	if s.limit.cpuBound() {
		return waitCPU
	}
	return waitSlot
}

// judgeLocked judges whether the worker is behind now, at most once per
// half meterBucket unless always, and reports whether the judgement
// changed (behind or not, its reason or group).
func (s *scheduler) judgeLocked(now time.Time, always bool) bool {
	if !always && now.Before(s.meter.judgeAt) {
		return false
	}
	s.meter.judgeAt = now.Add(meterBucket / 2)
	c, span := s.meter.window(now)
	stuck, stuckKind := s.oldestWaitLocked(now)
	r := behindReport{Behind: judgeBehind(c, s.judged.Behind, stuck)}
	if span > 0 {
		r.Due, r.Done = c.due/span.Seconds(), float64(c.done)/span.Seconds()
	}
	if r.Behind {
		r.Reason = behindReason(c)
		if stuck && c.done < behindEvidence {
			r.Reason = stuckKind.reason()
		}
		if r.Reason == BehindMaxPolls && s.limit.cpuBound() {
			// More polls at once would not run more while the CPU is busy.
			r.Reason = BehindCPU
		}
		if r.Reason == BehindHostLimit {
			r.Group = s.mostCrowdedLocked(s.judged.Group)
		}
	}
	was := s.judged
	s.judged = r
	return r.Behind != was.Behind || r.Reason != was.Reason || r.Group != was.Group
}

// oldestWaitLocked reports whether a poll has waited for a slot longer
// than oldestWaitBound, and for which kind of slot.
func (s *scheduler) oldestWaitLocked(now time.Time) (bool, waitKind) {
	tooLong := func(w *pollLoop) bool { return now.Sub(w.next) > oldestWaitBound(w.sess.Interval.D()) }
	if s.admit.Len() > 0 && tooLong(s.admit.head()) {
		return true, s.slotKindLocked()
	}
	for g := range s.crowded {
		if tooLong(g.waiting.head()) {
			return true, s.groupWaitKindLocked(g)
		}
	}
	return false, waitSlot
}

// mostCrowdedLocked returns the name of the group with the most polls
// waiting for a slot, keeping prev while it has as many as any ("" when
// none waits).
func (s *scheduler) mostCrowdedLocked(prev string) string {
	best, most := "", 0
	if g := s.groups[prev]; g != nil {
		best, most = prev, g.waiting.Len()
	}
	for g := range s.crowded {
		if n := g.waiting.Len(); n > most {
			best, most = g.name, n
		}
	}
	return best
}

// meterPolledLocked counts w's poll, which has just returned, in the
// meter (late against when it would have begun if the worker kept up, or,
// for the first poll of the loop or after a lease in doubt, against its
// due time), and sets when w's next poll would begin if the worker kept up:
// gap after this one began (its interval with the spread step and
// backoff), or now if the poll overran that.
func (s *scheduler) meterPolledLocked(w *pollLoop, now, began time.Time, gap time.Duration) {
	from := w.expect
	if from == 0 {
		from = w.next.UnixNano() // a first poll: late against its due time
	}
	lag := time.Duration(began.UnixNano() - from)
	due, judged := owed(lag, w.sess.Interval.D())
	s.meter.polled(now, due, judged)
	w.expect = max(now.UnixNano(), began.UnixNano()+int64(gap))
}

// Failures is how many polls of l failed in a row, as of its last turn.
func (s *scheduler) Failures(l *pollLoop) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return l.failures
}
