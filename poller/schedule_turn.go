package poller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/pollworker/pollworker/hrw"
	"github.com/pollworker/pollworker/lease"
)

// One turn of a poll loop, top to bottom: the timer finds it due (fire),
// settleLocked and takeSlotsLocked admit it (schedule_slots.go), a runner
// runs it (run → turn: the owner's Turn hook loads the state and polls),
// polled records its outcome, and nextDue says when the next turn is due.

// runnerIdle is how long a runner waits for another poll before it exits.
const runnerIdle = time.Second

// runner is a goroutine that runs polls one after another (scheduler.run).
type runner struct {
	work chan *pollLoop // the next poll; buffered 1, sent only by the launch that took the runner off idle
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
// polls, then polled records the outcome and queues the next turn.
func (s *scheduler) turn(l *pollLoop) {
	s.mu.Lock()
	ctx, due := l.ctx, l.next
	s.mu.Unlock()
	began := s.cfg.Clock.Now() // when the poll really starts, for the meter
	end := s.cfg.Turn(ctx, l, due)
	s.polled(l, end, began)
}

// polled records how l's turn, begun at began, ended, and settles l at
// its next due time (nextDue), or at once if the poll overran it. A
// failure counts toward backoff; a poll skipped for want of a local
// resource (ErrNoCapacity) or cancelled neither counts nor resets it. The
// slots freed by the poll go to the polls due earliest among those
// waiting for them, before l.
func (s *scheduler) polled(l *pollLoop, end turnEnd, began time.Time) {
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
	if end.out == pollOK || end.out == pollFailed {
		s.meterPolledLocked(l, now, began, next.Sub(l.next))
	}
	if next.Before(now) {
		next = now
	}
	// The freed slot goes to the polls already waiting first: l, due again
	// at once after a poll that overran its interval, queues behind them
	// rather than keep the slot (which starved the waiting sessions).
	launch := s.admitLocked(now)
	if s.settleLocked(l, now, next) {
		launch = append(launch, l)
	}
	changed := s.judgeLocked(now, false)
	s.mu.Unlock()
	s.launchAll(launch)
	if changed {
		s.cfg.Wake() // the owner logs the change (Coordinator.checkBehind)
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

// Pacing of first polls without a schedule to keep (paceLocked).
const (
	// firstPollGap is the least time between two paced first polls: at
	// most 4 start per millisecond.
	firstPollGap = 250 * time.Microsecond
	// maxFirstPollDelay bounds how late pacing makes a first poll (and
	// half the session's interval, if less).
	maxFirstPollDelay = 500 * time.Millisecond
)

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
