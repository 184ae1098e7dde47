package poller

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// The scheduler's records (schedule.go): a held session's poll loop,
// how a turn ends, the groups of GroupLimiter and the heaps by due time.

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
	state  *SessionState // the session's state with Config.Stateful; nil otherwise
	slots  *slotLoop     // the slots of a scheduled session; nil for one polled on an interval
	polled *atomic.Bool  // a poll began under this lease (shared by a restarted loop)

	// Guarded by scheduler.mu.
	done          chan struct{} // closed when the loop has exited and no poll runs; made by the first Exited (most loops are never waited for)
	phase         phase
	index         int       // position in the scheduler's queue while queued
	next          time.Time // when the next (or running) poll is due
	rank          time.Time // its place in the heaps: next, or, behind its schedule, when its last poll began (record)
	rankFrom      time.Time // set by record for the settle that follows: the rank of a poll due at once; zero: next
	lastBegan     time.Time // when its last poll began (record); zero before the first: ties of rank go to the one polled longest ago
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

// Admission: when a loop's poll is due (fire), whether it may run now
// (settleLocked: the lease Held, the deadline not passed; takeSlotsLocked:
// a slot of its group and of the limit free), and the heaps it waits in
// by due time until it may (earliest deadline first), all under
// scheduler.mu.

// pollGroup is a group of sessions whose polls share a bound of their own
// (GroupLimiter: an HTTP poller's hosts).
type pollGroup struct {
	name   string
	max    int // polls of the group at once
	active int // polls of the group running, or admitting with the group's slot
	// admitting counts those of active admitting: holding the group's
	// slot while they wait for one of the limit's. A group full only of
	// them waits for the limit, not for its own bound (groupWaitKind).
	admitting int
	waiting   dueQueue // due polls waiting for a slot of the group, earliest due first
	members   int      // loops of the group not exited
}

// runner is a goroutine that runs polls one after another (scheduler.run).
type runner struct {
	work chan *pollLoop // the next poll; buffered 1, sent only by the launch that took the runner off idle
}

// dueQueue is a min-heap of loops by rank, ties going to the loop whose
// last poll began first. Each entry carries copies of its loop's keys,
// which do not change while it is queued, so that ordering reads no loop
// (among thousands, a loop is rarely in cache), and the heap is written
// out for this one type rather than behind container/heap's interface.
type dueQueue []dueEntry

// dueEntry is a loop in a dueQueue with its rank and lastBegan.
type dueEntry struct {
	rank, began time.Time
	l           *pollLoop
}

func (q dueQueue) Len() int { return len(q) }

// head is the first loop; the queue must not be empty.
func (q dueQueue) head() *pollLoop { return q[0].l }

func (q dueQueue) less(i, j int) bool {
	a, b := &q[i], &q[j]
	if !a.rank.Equal(b.rank) {
		return a.rank.Before(b.rank)
	}
	return a.began.Before(b.began)
}

func (q dueQueue) swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].l.index, q[j].l.index = i, j
}

// push adds l, keyed by its rank and lastBegan as they are now.
func (q *dueQueue) push(l *pollLoop) {
	l.index = len(*q)
	*q = append(*q, dueEntry{rank: l.rank, began: l.lastBegan, l: l})
	q.up(l.index)
}

// pop removes and returns the first loop; the queue must not be empty.
func (q *dueQueue) pop() *pollLoop { return q.remove(0) }

// remove removes and returns the loop at index i.
func (q *dueQueue) remove(i int) *pollLoop {
	old := *q
	n := len(old) - 1
	l := old[i].l
	if i != n {
		old.swap(i, n)
		if rest := old[:n]; !rest.down(i) {
			rest.up(i)
		}
	}
	old[n] = dueEntry{}
	*q = old[:n]
	l.index = -1
	return l
}

func (q dueQueue) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !q.less(j, i) {
			return
		}
		q.swap(i, j)
		j = i
	}
}

// down moves the entry at i0 down to its place and reports whether it
// moved.
func (q dueQueue) down(i0 int) bool {
	i := i0
	for {
		j := 2*i + 1
		if j >= len(q) {
			break
		}
		if j2 := j + 1; j2 < len(q) && q.less(j2, j) {
			j = j2
		}
		if !q.less(j, i) {
			break
		}
		q.swap(i, j)
		i = j
	}
	return i > i0
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

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
