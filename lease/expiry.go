package lease

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/utils/clock"
)

// expiryGroup makes the leases acquired or renewed by one script call Lost
// at their common local deadline, with one timer instead of one per lease:
// renewing 100,000 leases then touches about 200 timers, not 100,000.
//
// Invariant: a lease that is Held or Uncertain belongs to exactly one group
// (Lease.group), whose deadline equals the lease's deadline and whose timer
// is armed or has fired. A lease leaves its group when a later deadline
// moves it to a newer group, or when it becomes Lost or Released; the timer
// of a group that no lease belongs to any more is stopped.
type expiryGroup struct {
	deadline time.Time
	leases   []*Lease     // the leases that joined; read by the timer only after seal
	live     atomic.Int64 // leases whose group this still is, +1 until sealed
	timer    clock.Timer  // set by seal, before the construction reference is dropped
}

// newGroup returns an unsealed group for deadline; leases join it with
// join, then seal arms its timer.
func newGroup(deadline time.Time, capacity int) *expiryGroup {
	g := &expiryGroup{deadline: deadline, leases: make([]*Lease, 0, capacity)}
	g.live.Store(1) // the construction reference: the count cannot reach 0 before seal
	return g
}

// joinLocked moves l from its current group to g, which must be unsealed and
// owned by the calling goroutine, and sets l's deadline to g's. Caller holds
// l.mu.
func (l *Lease) joinLocked(g *expiryGroup) {
	g.live.Add(1)
	g.leases = append(g.leases, l)
	l.leaveGroupLocked()
	l.group = g
	l.deadline = g.deadline
}

// leaveGroupLocked takes l out of its group, if any; the last lease to leave
// stops the group's timer. Caller holds l.mu.
func (l *Lease) leaveGroupLocked() {
	if g := l.group; g != nil {
		l.group = nil
		g.release()
	}
}

// release drops one reference to g and stops its timer when none is left.
func (g *expiryGroup) release() {
	if g.live.Add(-1) == 0 && g.timer != nil {
		g.timer.Stop()
	}
}

// seal arms g's timer (unless no lease joined) and drops the construction
// reference. now is the current time on the manager's clock.
func (m *Manager) seal(g *expiryGroup, now time.Time) {
	if g.live.Load() > 1 {
		// The callback runs in its own goroutine, as time.AfterFunc does
		// (fake clocks call it with their lock held).
		g.timer = m.cfg.Clock.AfterFunc(g.deadline.Sub(now), func() { go m.expireGroup(g) })
	}
	g.release()
}

// expireGroup runs when g's deadline passes: every lease still in g is Lost.
func (m *Manager) expireGroup(g *expiryGroup) {
	now := m.cfg.Clock.Now()
	if now.Before(g.deadline) { // never for real timers; kept for any clock
		g.timer.Reset(g.deadline.Sub(now))
		return
	}
	var changes []change
	for _, l := range g.leases {
		l.mu.Lock()
		if l.group != g || (l.state != Held && l.state != Uncertain) {
			l.mu.Unlock()
			continue
		}
		from := l.state
		m.forget(l) // before the state changes, so that a Lost lease is never listed
		l.setLocked(Lost, "deadline passed")
		l.mu.Unlock()
		if ce := m.log.Check(zapcore.DebugLevel, "lease lost"); ce != nil { // no fields built per lease unless logged
			ce.Write(zap.String("session", l.session), zap.String("event", "lost"),
				zap.Int64("token", l.token), zap.String("reason", "deadline passed"))
		}
		changes = append(changes, change{l, from, Lost})
	}
	m.logSummary(changes, Lost, zapcore.WarnLevel, "leases lost: their deadline passed without a renewal", "lost")
	m.notify(changes)
}
