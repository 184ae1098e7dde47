package poller

import (
	"context"
	"math"
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
// downstream. Aborting cancels the running poll too (a session paused or
// removed, a drain past DrainTimeout); the lease term ending (uncertain,
// lost) always does.
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
	fairIn        waitHeap           // the heaps its last poll waited in (a set), whose keys fair has; none when its last poll did not wait
	fair          [2]int64           // by heap (groupHeap, admitHeap): its key there if its next poll waits there too: the key its last poll left with, plus that poll's step (fairKey)
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
// by fair turn until it may (fairKey), all under
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
	waiting   dueQueue // due polls waiting for a slot of the group, by fair turn (fairKey)
	members   int      // loops of the group not exited
}

// runner is a goroutine that runs polls one after another (scheduler.run).
type runner struct {
	work chan *pollLoop // the next poll; buffered 1, sent only by the launch that took the runner off idle
}

// waitHeap names a heap a due poll waits in for a slot, as a set
// (pollLoop.fairIn).
type waitHeap uint8

const (
	groupHeap waitHeap = 1 << iota // its group's (pollGroup.waiting)
	admitHeap                      // the limit's (scheduler.admit)
)

// fairOf is the index of in's key in pollLoop.fair.
func fairOf(in waitHeap) int { return int(in >> 1) }

// dueQueue is a min-heap of loops by rank, ties going to the loop whose
// last poll began first. Each entry carries its loop's rank and lastBegan,
// which do not change while it is queued, as integer keys (dueKey), so
// that ordering reads no loop (among thousands, a loop is rarely in cache)
// and compares two integers rather than two time.Times; the heap is
// written out for this one type rather than behind container/heap's
// interface, and 4-ary, which halves the depth of a binary heap and so
// the loops written to (their index) per pop.
type dueQueue struct {
	epoch   time.Time // the first push's now: keys count from it
	entries []dueEntry
	// In a heap of polls waiting for a slot: served is the key of the
	// poll last taken out (popFair; no key is pushed below it), and offset
	// moves the rank of a poll that starts waiting (fairKey) to the polls
	// served now: served less the time it was taken out.
	served, offset int64
}

// dueArity is the number of children of a dueQueue node.
const dueArity = 4

// dueEntry is a loop in a dueQueue with the keys of its rank and lastBegan.
type dueEntry struct {
	rank, began int64
	l           *pollLoop
}

// key is t's place in q's order, computed at now: the time from q's epoch
// to now plus the time from now to t. For a time with a monotonic clock
// reading (every time the scheduler takes from its clock, and those it
// adds to) that is the monotonic time from the epoch; a time without one
// (a cron slot's start) is placed by its distance from now on the wall
// clock, as the timer that waits for it counts, so that a wall clock
// step before it is pushed cannot put it ahead of loops due before it.
// The zero time (a loop never polled) comes first.
func (q *dueQueue) key(t, now time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return int64(now.Sub(q.epoch) + t.Sub(now))
}

func (q *dueQueue) Len() int { return len(q.entries) }

// The heaps of polls waiting for a slot share the slots in proportion to
// the sessions' rates, as start-time fair queuing shares a link: a poll
// waiting there takes the key its previous poll was served with plus its
// step (one interval, or more when backing off), if its previous poll
// waited in the same heap, and else the key of the polls served now less
// how late it is (its rank before now). Under overload every session
// then waits in the heap in turn, each one interval's worth of keys after
// its last poll, and the keys served advance at the rate the slots allow:
// each session's gap between polls is its interval × due/achieved, alike
// for every interval (earliest due first instead gave every session the
// same wait, so that the shortest intervals slowed the most and the
// longest not at all). A poll that did not wait keeps no key (its
// session was served on time), and a session starting to wait ranks by
// its lateness among the polls served now, but never before the poll
// last served (ties go to the loop polled longest ago): none is starved
// behind another's past turns or by later arrivals, none gains a turn
// for having been idle. A key is never more than maxFairLag of keys
// after a fresh arrival's: a session of a long interval (an hourly one,
// a daily cron slot) would otherwise wait (due/achieved − 1) × its
// interval, an hour behind polls of a second for a capacity it barely
// uses, and a slot could be pushed past its catch-up window; it waits at
// most about maxFairLag × due/achieved past its due time instead, and
// slows less than the others.
const maxFairLag = int64(10 * time.Second)

// fairKey is l's key in q, a heap of polls waiting for a slot (in),
// were it pushed at now: its rank moved by the heap's offset, at least
// the key last served (its fresh key), or its fair key there when later,
// but at most maxFairLag after the fresh key; the zero rank (a loop
// never polled) comes first.
func (q *dueQueue) fairKey(l *pollLoop, in waitHeap, now time.Time) int64 {
	if q.epoch.IsZero() {
		q.epoch, q.served = now, math.MinInt64
	}
	k := q.key(l.rank, now)
	if k == math.MinInt64 {
		return k
	}
	k = max(k+q.offset, q.served)
	if l.fairIn&in != 0 && l.fair[fairOf(in)] > k {
		k = min(l.fair[fairOf(in)], k+maxFairLag)
	}
	return k
}

// pushFair adds l to q, a heap of polls waiting for a slot (in), at its
// fairKey.
func (q *dueQueue) pushFair(l *pollLoop, in waitHeap, now time.Time) {
	q.pushKey(l, q.fairKey(l, in, now), now)
}

// leadsFair reports whether q's first loop ranks before l, or with it,
// were l pushed at now with pushFair (false for an empty queue).
func (q *dueQueue) leadsFair(l *pollLoop, in waitHeap, now time.Time) bool {
	if len(q.entries) == 0 {
		return false
	}
	h := &q.entries[0]
	rank, began := q.fairKey(l, in, now), q.key(l.lastBegan, now)
	return h.rank < rank || h.rank == rank && h.began <= began
}

// popFair removes and returns the first loop of q, a heap of polls
// waiting for a slot (in): the loop keeps its key (fair), and q's offset
// moves to it. q must not be empty.
func (q *dueQueue) popFair(in waitHeap, now time.Time) *pollLoop {
	k := q.entries[0].rank
	l := q.remove(0)
	l.fairIn &^= in
	if k != math.MinInt64 {
		q.served, q.offset = k, k-q.key(now, now)
		l.fair[fairOf(in)] = k
		l.fairIn |= in
	}
	return l
}

// head is the first loop; the queue must not be empty.
func (q *dueQueue) head() *pollLoop { return q.entries[0].l }

func (q *dueQueue) less(i, j int) bool {
	a, b := &q.entries[i], &q.entries[j]
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.began < b.began
}

func (q *dueQueue) swap(i, j int) {
	e := q.entries
	e[i], e[j] = e[j], e[i]
	e[i].l.index, e[j].l.index = i, j
}

// push adds l, keyed by its rank and lastBegan at now.
func (q *dueQueue) push(l *pollLoop, now time.Time) {
	if q.epoch.IsZero() {
		q.epoch = now
	}
	q.pushKey(l, q.key(l.rank, now), now)
}

// pushKey adds l with the key rank, and its lastBegan's at now.
func (q *dueQueue) pushKey(l *pollLoop, rank int64, now time.Time) {
	l.index = len(q.entries)
	q.entries = append(q.entries, dueEntry{rank: rank, began: q.key(l.lastBegan, now), l: l})
	q.up(l.index)
}

// pop removes and returns the first loop; the queue must not be empty.
func (q *dueQueue) pop() *pollLoop { return q.remove(0) }

// remove removes and returns the loop at index i.
func (q *dueQueue) remove(i int) *pollLoop {
	n := len(q.entries) - 1
	l := q.entries[i].l
	if i != n {
		q.swap(i, n) // the last entry fills i, and is put in its place below
	}
	q.entries[n] = dueEntry{}
	q.entries = q.entries[:n]
	if i != n && !q.down(i) {
		q.up(i)
	}
	l.index = -1
	return l
}

func (q *dueQueue) up(j int) {
	for j > 0 {
		i := (j - 1) / dueArity
		if !q.less(j, i) {
			return
		}
		q.swap(i, j)
		j = i
	}
}

// down moves the entry at i0 down to its place and reports whether it
// moved.
func (q *dueQueue) down(i0 int) bool {
	i, n := i0, len(q.entries)
	for {
		first := dueArity*i + 1
		if first >= n {
			break
		}
		j := first // the least child
		for c := first + 1; c < first+dueArity && c < n; c++ {
			if q.less(c, j) {
				j = c
			}
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
