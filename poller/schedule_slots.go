package poller

import (
	"container/heap"
	"time"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// Admission: when a loop's poll is due (fire), whether it may run now
// (settleLocked: the lease Held, the deadline not passed; takeSlotsLocked:
// a slot of its group and of the limit free), and the heaps it waits in
// by due time until it may (earliest deadline first), all under
// scheduler.mu.

// pollGroup is a group of sessions whose polls share a bound of their own
// (GroupLimiter: an HTTP poller's hosts).
type pollGroup struct {
	name    string
	max     int      // polls of the group at once
	active  int      // polls of the group running, or admitting with the group's slot
	waiting dueQueue // due polls waiting for a slot of the group, earliest due first
	members int      // loops of the group not exited
}

// fire launches the polls that are due and re-arms the timer.
func (s *scheduler) fire() {
	s.mu.Lock()
	now := s.cfg.Clock.Now()
	s.armed = time.Time{}
	var launch []*pollLoop
	for s.queue.Len() > 0 && !s.queue[0].next.After(now) {
		w := heap.Pop(&s.queue).(*pollLoop)
		if s.settleLocked(w, now, w.next) {
			launch = append(launch, w)
		}
	}
	s.armLocked(now) // the head may be a loop not pushed above
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
// the caller then runs its turn on a runner (launch).
func (s *scheduler) settleLocked(w *pollLoop, now, at time.Time) bool {
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

// takeSlotsLocked starts w's due poll if a slot of its group (if any) and
// one of the limit's are free, and reports it; else w waits, in a heap by
// due time, for a slot of its group, or, holding that, for one of the
// limit's. from is the phase w comes from: a poll leaving one wait for the
// next is counted once (Deferred).
func (s *scheduler) takeSlotsLocked(w *pollLoop, now time.Time, from phase) bool {
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
	if s.cfg.Limit > 0 && s.active >= s.cfg.Limit {
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

// admitLocked gives the free slots to the due polls waiting for them,
// earliest due first, and returns those to launch: a group's free slot to
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
				w := heap.Pop(&g.waiting).(*pollLoop)
				s.waiting--
				if g.waiting.Len() == 0 {
					delete(s.crowded, g)
				}
				if s.settleLocked(w, now, w.next) {
					launch = append(launch, w)
				}
			}
		}
		for s.admit.Len() > 0 && (s.cfg.Limit <= 0 || s.active < s.cfg.Limit) {
			w := heap.Pop(&s.admit).(*pollLoop)
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
	at := s.queue[0].next.Add(min(s.cfg.Slack, s.shortest/100))
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

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// dueQueue is a min-heap of queued loops by next poll time.
type dueQueue []*pollLoop

func (q dueQueue) Len() int { return len(q) }

func (q dueQueue) Less(i, j int) bool { return q[i].next.Before(q[j].next) }

func (q dueQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

func (q *dueQueue) Push(x any) {
	w := x.(*pollLoop)
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
