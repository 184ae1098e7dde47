package poller

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

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
// Each worker is in one phase: queued (in the heap), waiting (its lease is
// Uncertain; a lease change wakes it), groupWaiting or admitting (due,
// waiting for a slot of its group or of the limit), polling, or exited.
// Every poll waiting for a slot waits in a heap by due time: the slot a
// poll frees goes to the poll due earliest (earliest deadline first), so
// that under overload every session slows alike. A worker polls
// only when its lease is Held, its term not ended and its deadline not
// passed; the poll's context is cancelled by the lease term's end
// (pollContext, Lease.AfterTerm), the moment the lease stops being Held.
type scheduler struct {
	clock clock.WithTickerAndDelayedExecution
	poll  func(w *worker) // runs one poll of w; called on a runner (launch)
	wake  func()          // tells the main loop that a worker exited
	// align, if set, returns how much later than one interval after its
	// previous poll w's next poll should be, to move it toward its phase
	// (spreadStep); set before the first start.
	align func(id string, interval time.Duration, next time.Time) time.Duration
	// limit, if positive, bounds the polls running at once; due polls
	// beyond it wait in admit, earliest due first (set before the first
	// start).
	limit int
	// groupOf, if set, returns the group of a session's polls and how many
	// of them may run at once (GroupLimiter); due polls of a full group
	// wait in its heap, earliest due first. Set before the first start.
	groupOf func(s *session.Session) (name string, max int)
	// maxBackoff, if positive, lets a session whose polls fail wait
	// longer between polls (backoff); set before the first start.
	maxBackoff time.Duration
	// behindSpan, if positive, is how long a worker stays behind before
	// each step of its shedding (shed); set before the first start.
	behindSpan time.Duration
	// pace, if set, paces the first polls of loops started without a
	// schedule to keep (paceLocked); set before the first start.
	pace bool
	// slack, if positive, is how late the timer may fire after the
	// earliest queued poll is due, at most a hundredth of the shortest
	// interval started, so that polls due close together start in one
	// firing (TimerSlack); set before the first start.
	slack time.Duration
	// ownGoroutine says the timer's callback already runs in a goroutine
	// of its own (the real clock's AfterFunc), so fire can run there; fake
	// clocks call it with their lock held.
	ownGoroutine bool
	// quit, closed by close, ends the idle runners (run).
	quit     chan struct{}
	runMu    sync.Mutex    // guards idle
	idle     []*runner     // runners waiting for a poll, in the order they went idle
	mu       sync.Mutex    // guards everything below and the scheduling fields of every worker
	active   int           // polls running
	paceAt   time.Time     // when the next paced first poll may start
	shortest time.Duration // the shortest interval of a worker started; 0 before the first
	admit    dueQueue      // due polls waiting for one of limit's slots, earliest due first (each holds its group's slot)
	waiting  int           // workers in phase admitting or groupWaiting
	groups   map[string]*pollGroup
	freed    []*pollGroup            // groups whose slots were freed while polls wait for them (admitLocked)
	crowded  map[*pollGroup]struct{} // groups with polls waiting for a slot
	stats    schedStats
	meter    pollMeter    // polls due and run over the last behindWindow (behind.go)
	judged   behindReport // the last judgement of the meter
	queue    dueQueue     // queued workers by next poll time
	// workers are the poll loops by session id. Only the coordinator's
	// main loop writes it, under mu (start, forget), so that it reads it
	// without mu and the scheduler reads it under mu (leaseChanged).
	workers map[string]*worker
	timer   clock.Timer
	armed   time.Time // when the timer fires; zero when it is not armed
	ended   []*worker // exited workers the main loop has not collected
	done    bool      // close was called: the timer is not armed again
}

// phase is where a worker stands in the scheduler.
type phase uint8

const (
	queued       phase = iota // in the heap, waiting for its next poll time
	waiting                   // lease Uncertain (or Held past its deadline): a lease change wakes it
	admitting                 // due, holding its group's slot, waiting for one of the limit's slots
	polling                   // a poll runs
	exited                    // done is closed
	groupWaiting              // due, waiting for a slot of its group (GroupLimiter)
)

// pollGroup is a group of sessions whose polls share a bound of their own
// (GroupLimiter: an HTTP poller's hosts).
type pollGroup struct {
	name    string
	max     int      // polls of the group at once
	active  int      // polls of the group running, or admitting with the group's slot
	waiting dueQueue // due polls waiting for a slot of the group, earliest due first
	members int      // workers of the group not exited
}

// outcome is how a poll ended, for the scheduler.
type outcome uint8

const (
	pollOK        outcome = iota // the target answered (or the poll returned nil)
	pollFailed                   // an error or a panic: counts toward backoff
	pollCancelled                // cut short by the lease term's end or an abort
	pollSkipped                  // not sent for want of a local resource (ErrNoCapacity): no failure, no backoff
	pollStopped                  // not started: its loop was asked to stop since it was launched
)

// schedStats counts what the scheduler did since start.
type schedStats struct {
	Deferred int64        // polls that waited for a slot (of the limit or of their group)
	Late     int64        // polls that started later than a tenth of their interval after they were due
	Skipped  int64        // polls the Poller did not send for want of a local resource (ErrNoCapacity)
	Behind   behindReport // whether the worker keeps up, and if not why (set by snapshot)
}

func newScheduler(clk clock.WithTickerAndDelayedExecution, poll func(*worker), wake func()) *scheduler {
	_, real := clk.(clock.RealClock)
	return &scheduler{clock: clk, poll: poll, wake: wake, workers: make(map[string]*worker), ownGoroutine: real,
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

// runnerIdle is how long a runner waits for another poll before it exits.
const runnerIdle = time.Second

// runner is a goroutine that runs polls one after another (scheduler.run).
type runner struct {
	work chan *worker // the next poll; buffered 1, sent only by the launch that took the runner off idle
}

// launch runs s.poll(w) on a runner: the one that went idle last, if any
// waits, else a new one. Called without s.mu held.
func (s *scheduler) launch(w *worker) {
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
func (s *scheduler) run(w *worker) {
	r := &runner{work: make(chan *worker, 1)}
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	for {
		w.began = s.clock.Now().UnixNano() // when the poll really starts, for the meter (polled)
		s.poll(w)
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

// start schedules w's first poll at `at`, or now if that has passed. A
// zero `at` means there is no schedule to keep (the session was not handed
// over): with pace set, the first poll is then paced (paceLocked).
func (s *scheduler) start(w *worker, at time.Time) {
	s.mu.Lock()
	now := s.clock.Now()
	s.workers[w.sess.ID] = w
	if s.groupOf != nil && w.group == nil {
		w.group = s.joinGroupLocked(w.sess)
	}
	if iv := w.sess.Interval.D(); iv > 0 && (s.shortest == 0 || iv < s.shortest) {
		s.shortest = iv
	}
	if at.IsZero() && s.pace {
		at = s.paceLocked(w, now)
	}
	launch := s.settleLocked(w, now, maxTime(now, at))
	s.mu.Unlock()
	if launch {
		s.launch(w)
	}
}

// stop ends w's loop: at once if no poll runs, else when the poll returns.
func (s *scheduler) stop(w *worker) {
	s.mu.Lock()
	w.stopRequested = true
	var launch []*worker
	switch w.phase {
	case queued:
		heap.Remove(&s.queue, w.index)
		s.exitLocked(w)
	case admitting, groupWaiting:
		s.unwaitLocked(w)
		s.exitLocked(w)
		launch = s.admitLocked(s.clock.Now())
	case waiting:
		s.exitLocked(w)
	}
	s.mu.Unlock()
	s.launchAll(launch)
}

// stopRequestedFor reports whether w's loop was asked to stop (stop).
func (s *scheduler) stopRequestedFor(w *worker) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return w.stopRequested
}

// abort cancels w's running poll, if any.
func (s *scheduler) abort(w *worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.phase == polling && w.cancel != nil {
		w.cancel()
	}
}

// exited returns a channel closed when w's loop has exited and no poll of
// it runs (closed already if it has).
func (s *scheduler) exited(w *worker) <-chan struct{} {
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

// collect returns the workers that exited since the last call.
func (s *scheduler) collect() []*worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	ended := s.ended
	s.ended = nil
	return ended
}

// close stops the timer; workers still queued stay queued.
func (s *scheduler) close() {
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

// forget takes the worker of session id out of workers if it is w (its
// loop exited and was collected). Called by the main loop only.
func (s *scheduler) forget(id string, w *worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workers[id] == w {
		delete(s.workers, id)
	}
}

// leaseChanged wakes the worker of l: a lost or released lease ends a
// queued or waiting loop at once, a lease back to Held polls at once. A
// running poll is already cancelled with the term; its end settles it.
func (s *scheduler) leaseChanged(l *lease.Lease, to lease.State) {
	s.mu.Lock()
	w := s.workers[l.Session()]
	if w == nil || w.lease != l || w.phase == polling || w.phase == exited {
		s.mu.Unlock()
		return
	}
	var launch []*worker
	now := s.clock.Now()
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

// launchAll launches each of ws (s.launch); called without s.mu held.
func (s *scheduler) launchAll(ws []*worker) {
	for _, w := range ws {
		s.launch(w)
	}
}

// polled settles w after a poll that began at its due time: next one
// interval later (plus the align step, if any; longer after failures, with
// maxBackoff), or at once if the poll overran it. out is how the poll
// ended: a failure counts toward backoff; a poll skipped for want of a
// local resource (ErrNoCapacity) or cancelled neither counts nor resets
// it. The slots freed by the poll go to the polls due earliest among those
// waiting for them, before w.
func (s *scheduler) polled(w *worker, out outcome) {
	s.mu.Lock()
	now := s.clock.Now()
	w.cancel()
	w.ctx, w.cancel = nil, nil
	s.active--
	s.freeGroupSlotLocked(w.group)
	iv := w.sess.Interval.D()
	next := w.next.Add(iv)
	if s.align != nil && !w.exact {
		next = next.Add(s.align(w.sess.ID, iv, next))
	}
	w.exact = false
	retry := w.retryAfter
	w.retryAfter = 0
	if out == pollStopped {
		next = w.next // not polled: the due time a successor keeps (nextDue)
	}
	switch out {
	case pollOK, pollFailed:
		next = next.Add(s.backoffLocked(w, out == pollFailed))
		if at := now.Add(retry); retry > 0 && at.After(next) {
			next = at // the target's Retry-After (RetryAfterError)
		}
		s.meterPolledLocked(w, now, next.Sub(w.next))
	case pollSkipped:
		s.stats.Skipped++
	}
	if w.slots != nil && out != pollStopped {
		next = w.slots.next(now, out == pollCancelled) // the next slot's start (slots.go)
	}
	if next.Before(now) {
		next = now
	}
	// The freed slot goes to the polls already waiting first: w, due again
	// at once after a poll that overran its interval, queues behind them
	// rather than keep the slot (which starved the waiting sessions).
	launch := s.admitLocked(now)
	if s.settleLocked(w, now, next) {
		launch = append(launch, w)
	}
	changed := s.judgeLocked(now, false)
	s.mu.Unlock()
	s.launchAll(launch)
	if changed {
		s.wake() // the main loop logs the change (Coordinator.checkBehind)
	}
}

// backoffLocked records the outcome of w's poll and returns how much
// longer than its interval w waits before its next poll: after k
// consecutive failures, (2^min(k,5) - 1) × interval, at most maxBackoff,
// with a jitter of up to a tenth of it (a hash of the session and k, so
// sessions failing together do not retry together); 0 after a success.
func (s *scheduler) backoffLocked(w *worker, failed bool) time.Duration {
	if s.maxBackoff <= 0 {
		return 0
	}
	if !failed {
		w.failures = 0
		return 0
	}
	w.failures++
	extra := ErrorBackoff(w.failures, w.sess.Interval.D(), s.maxBackoff)
	if extra <= 0 {
		return 0
	}
	jitter := time.Duration(hrw.Bucket(fmt.Sprintf("%s#%d", w.sess.ID, w.failures), 1000)) * extra / 10000
	return extra - extra/10 + 2*jitter
}

// ErrorBackoff is how much longer than interval a session waits for its
// next poll after failures consecutive failed polls, before jitter:
// (2^min(failures,5) - 1) × interval, at most max; 0 after none or when
// max is not positive (backoff off). The scheduler takes up to a tenth off
// or adds it, from a hash of the session and the count.
func ErrorBackoff(failures int, interval, max time.Duration) time.Duration {
	if failures <= 0 || max <= 0 {
		return 0
	}
	return min(time.Duration((1<<min(failures, 5))-1)*interval, max)
}

// admitLocked gives the free slots to the due polls waiting for them,
// earliest due first, and returns those to launch: a group's free slot to
// the group's earliest waiting poll (which then waits for one of the
// limit's slots if none is free), a free slot of the limit to the
// earliest poll waiting for one.
func (s *scheduler) admitLocked(now time.Time) []*worker {
	var launch []*worker
	for {
		for len(s.freed) > 0 {
			g := s.freed[len(s.freed)-1]
			s.freed[len(s.freed)-1] = nil
			s.freed = s.freed[:len(s.freed)-1]
			for g.active < g.max && g.waiting.Len() > 0 {
				w := heap.Pop(&g.waiting).(*worker)
				s.waiting--
				if g.waiting.Len() == 0 {
					delete(s.crowded, g)
				}
				if s.settleLocked(w, now, w.next) {
					launch = append(launch, w)
				}
			}
		}
		for s.admit.Len() > 0 && (s.limit <= 0 || s.active < s.limit) {
			w := heap.Pop(&s.admit).(*worker)
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
func (s *scheduler) unwaitLocked(w *worker) {
	s.waiting--
	switch w.phase {
	case admitting:
		heap.Remove(&s.admit, w.index)
		s.freeGroupSlotLocked(w.group)
	case groupWaiting:
		g := w.group
		heap.Remove(&g.waiting, w.index)
		if g.waiting.Len() == 0 {
			delete(s.crowded, g)
		}
	}
}

// holding counts, now, the poll loops that have not exited and run under a
// Held lease, and those among them backing off after failed polls. It
// reads the loops themselves (O(loops)), so that a loop that ended, by
// whichever path (handed off, lost, stopped, restarted), is never counted:
// counters kept on the side missed the handoff of a loop backing off.
func (s *scheduler) holding() (held, backoff int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.workers {
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

// takeSlotsLocked starts w's due poll if a slot of its group (if any) and
// one of the limit's are free, and reports it; else w waits, in a heap by
// due time, for a slot of its group, or, holding that, for one of the
// limit's. from is the phase w comes from: a poll leaving one wait for the
// next is counted once (Deferred).
func (s *scheduler) takeSlotsLocked(w *worker, now time.Time, from phase) bool {
	waited := from == admitting || from == groupWaiting
	if g := w.group; g != nil {
		if g.active >= g.max {
			w.phase = groupWaiting
			heap.Push(&g.waiting, w)
			s.crowded[g] = struct{}{}
			s.waitedLocked(now, waited, waitGroup)
			return false
		}
		g.active++
	}
	if s.limit > 0 && s.active >= s.limit {
		// Every slot is taken: wait for one rather than start a poll the
		// worker cannot sustain.
		w.phase = admitting
		heap.Push(&s.admit, w)
		s.waitedLocked(now, waited, waitSlot)
		return false
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

// waitedLocked counts a poll that starts waiting for a slot of the given
// kind (once per poll: not again when it already waited).
func (s *scheduler) waitedLocked(now time.Time, already bool, kind waitKind) {
	s.waiting++
	if !already {
		s.stats.Deferred++
		s.meter.waited(now, kind)
	}
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
	name, max := s.groupOf(sess)
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

// snapshot returns the scheduler's counters, whether it keeps up (judged
// now), and how many polls run and wait for a slot now.
func (s *scheduler) snapshot() (st schedStats, running, waiting int) {
	s.mu.Lock()
	changed := s.judgeLocked(s.clock.Now(), true)
	st = s.stats
	st.Behind = s.judged
	running, waiting = s.active, s.waiting
	s.mu.Unlock()
	if changed {
		s.wake()
	}
	return st, running, waiting
}

// fire launches the polls that are due and re-arms the timer.
func (s *scheduler) fire() {
	s.mu.Lock()
	now := s.clock.Now()
	s.armed = time.Time{}
	var launch []*worker
	for s.queue.Len() > 0 && !s.queue[0].next.After(now) {
		w := heap.Pop(&s.queue).(*worker)
		if s.settleLocked(w, now, w.next) {
			launch = append(launch, w)
		}
	}
	s.armLocked(now) // the head may be a worker not pushed above
	s.mu.Unlock()
	for _, w := range launch {
		s.launch(w)
	}
}

// settleLocked decides what w, which is neither queued nor polling (nor
// in a heap of waiting polls: the caller took it out), does next, given
// that its next poll is due at `at`: exit (stopped, or its lease lost or
// released), wait (lease uncertain or past its deadline), queue (not due
// yet), wait for a slot (takeSlotsLocked) or poll now, which it reports;
// the caller then runs s.poll(w) on a runner (launch).
func (s *scheduler) settleLocked(w *worker, now, at time.Time) bool {
	from := w.phase
	if from == admitting {
		// It gives back its group's slot and takes it again below if it
		// polls now.
		s.freeGroupSlotLocked(w.group)
	}
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
		heap.Push(&s.queue, w)
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

// pollContext returns the context of one poll under l's current Held
// term, cancelled the moment the term ends (Lease.AfterTerm), or ok false
// when the lease is not Held. It is not a child of Lease.Context, which
// would keep a context per held lease for as long as it is held.
func pollContext(l *lease.Lease) (ctx context.Context, cancel context.CancelFunc, ok bool) {
	ctx, cancelCtx := context.WithCancel(context.Background())
	stop, ok := l.AfterTerm(cancelCtx)
	if !ok {
		cancelCtx()
		return ctx, cancelCtx, false
	}
	return ctx, func() { stop(); cancelCtx() }, true
}

// nextDue returns when the exited worker w's next poll was due: the time
// its successor keeps to (its last poll's start + interval, or the time it
// was queued for).
func (s *scheduler) nextDue(w *worker) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return w.next
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// exitLocked ends w's loop and tells the main loop.
func (s *scheduler) exitLocked(w *worker) {
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
	s.wake()
}

// armLocked points the timer at the earliest queued poll, plus the slack.
func (s *scheduler) armLocked(now time.Time) {
	if s.queue.Len() == 0 || s.done {
		return
	}
	at := s.queue[0].next.Add(min(s.slack, s.shortest/100))
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
			s.timer = s.clock.AfterFunc(d, s.fire)
		} else {
			s.timer = s.clock.AfterFunc(d, func() { go s.fire() })
		}
		return
	}
	s.timer.Reset(d)
}

// dueQueue is a min-heap of queued workers by next poll time.
type dueQueue []*worker

func (q dueQueue) Len() int           { return len(q) }
func (q dueQueue) Less(i, j int) bool { return q[i].next.Before(q[j].next) }
func (q dueQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *dueQueue) Push(x any) {
	w := x.(*worker)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *dueQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	w.index = -1
	return w
}

// Pacing of first polls without a schedule to keep (paceLocked).
const (
	// firstPollGap is the least time between two paced first polls: at
	// most 4 start per millisecond.
	firstPollGap = 250 * time.Microsecond
	// maxFirstPollDelay bounds how late pacing makes a first poll (and
	// half the session's interval, if less).
	maxFirstPollDelay = 500 * time.Millisecond
)

// paceFirst reports whether w's first poll, due now and with no schedule
// to keep, starts now by paceLocked; if not, it makes the settling of w
// after its current turn put that poll at its paced time, exactly (without
// the spread step). Called from w's poll goroutine.
func (s *scheduler) paceFirst(w *worker) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	at := s.paceLocked(w, now)
	if !at.After(now) {
		return true
	}
	w.next = at.Add(-w.sess.Interval.D())
	w.exact = true
	return false
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
func (s *scheduler) paceLocked(w *worker, now time.Time) time.Time {
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

// maxSpreadStep bounds how much one interval is lengthened to move a
// session toward its phase (spreadStep).
const maxSpreadStep = 200 * time.Millisecond

// spreadStep spreads the polls of sessions with the same interval evenly
// over it, as Prometheus spreads scrapes: each session's phase within its
// interval is a hash of its id (the same on every worker, so a handoff
// keeps it), and a poll due at next that is off its phase is moved later
// by at most min(interval/10, maxSpreadStep). Polls are never moved
// earlier, so no interval is shortened; sessions acquired together (a
// start, a crash takeover) drift apart over about ten polls, and a
// graceful handoff's gap stays within its interval + maxSpreadStep.
func spreadStep(id string, interval time.Duration, next time.Time) time.Duration {
	if interval <= 0 {
		return 0
	}
	iv := int64(interval)
	phase := int64(hrw.Bucket(id, int(iv)))
	late := ((phase-next.UnixNano())%iv + iv) % iv // until the next instant on its phase
	return time.Duration(min(late, int64(min(interval/10, maxSpreadStep))))
}
