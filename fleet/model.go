package fleet

import (
	"time"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// Active returns the sessions read that are valid and not paused, in
// Order.
func (s *Snapshot) Active() []string {
	var out []string
	for _, id := range s.Order {
		if f := s.Sessions[id]; f.Session != nil && !f.Session.Paused {
			out = append(out, id)
		}
	}
	return out
}

// selectorOf is the selector of session id, none when it was not read.
func (s *Snapshot) selectorOf(id string) Selector {
	if f, ok := s.Sessions[id]; ok && f.Session != nil {
		return SelectorOf(*f.Session)
	}
	return Selector{}
}

// PlanOf returns the plan that places session id: its selector's (ranked
// among the matching workers only), or the default one.
func (s *Snapshot) PlanOf(id string) *assign.Plan {
	return s.Placement.PlanOf(s.selectorOf(id))
}

// OwnerOf returns the planned owner of session id, "" for none (no live
// worker, or none that matches its selector).
func (s *Snapshot) OwnerOf(id string) string {
	return s.Placement.OwnerOf(id, s.selectorOf(id))
}

// Placeable reports whether a live, placeable worker matches session id's
// selector (always for a session without one).
func (s *Snapshot) Placeable(id string) bool {
	return s.Placement.Placeable(s.selectorOf(id))
}

// Unplaceable returns the active sessions read whose selector no live,
// placeable worker's labels match, by canonical selector, in Order:
// polled by nobody until such a worker joins.
func (s *Snapshot) Unplaceable() map[string][]string {
	out := map[string][]string{}
	for _, id := range s.Active() {
		if sel := s.selectorOf(id); !s.Placement.Placeable(sel) {
			out[sel.String()] = append(out[sel.String()], id)
		}
	}
	return out
}

// PlannedLoad is the load all plans place on worker id.
func (s *Snapshot) PlannedLoad(id string) int { return s.Placement.Load(id) }

// LoadUnit names what the default plan weighs: "polls/day", or "sessions"
// for an index whose loads are incomplete (a selector's units are always
// weighed by load).
func (s *Snapshot) LoadUnit() string {
	if s.Weights.Complete {
		return "polls/day"
	}
	return "sessions"
}

// Holder is a lease holder as the fleet sees it.
type Holder struct {
	// ID is the holder's worker id, Incarnation the incarnation that
	// acquired the lease ("" for an owner value written before
	// incarnations existed).
	ID, Incarnation string
	// Live is set when ID is a live worker.
	Live bool
	// Current is set when the lease's incarnation is that live worker's
	// (or either is unknown: an owner value or a heartbeat without an
	// incarnation cannot be told apart, and counts as current).
	Current bool
	// Cordoned is set when ID is a cordoned live worker: it hands its
	// sessions off.
	Cordoned bool
}

// Polling reports whether the holder polls what it holds: its live,
// current incarnation.
func (h Holder) Polling() bool { return h.Live && h.Current }

// HolderOf tells who an owner value (lease.Holding.Owner) is.
func (s *Snapshot) HolderOf(owner string) Holder {
	o := lease.ParseOwner(owner)
	h := Holder{ID: o.Holder, Incarnation: o.Incarnation}
	if !s.Members.Contains(o.Holder) {
		return h
	}
	info, ok := s.Infos[o.Holder]
	h.Live = true
	h.Current = o.Incarnation == "" || !ok || info.Incarnation == "" || info.Incarnation == o.Incarnation
	h.Cordoned = s.Members.IsCordoned(o.Holder)
	return h
}

// LeaseHolder returns the holder of session id's lease, ok false when
// nobody holds it (or it was not read).
func (s *Snapshot) LeaseHolder(id string) (h Holder, ok bool) {
	f, found := s.Sessions[id]
	if !found || f.Lease.Owner == "" {
		return Holder{}, false
	}
	return s.HolderOf(f.Lease.Owner), true
}

// Quarantine is what the loss marker of a session's slot says of it.
type Quarantine struct {
	// Waits is set when no free lease of the slot is taken now, or the
	// next acquisition starts a quarantine (Pending).
	Waits bool
	// Left is how long the quarantine lasts; 0 when Pending.
	Left time.Duration
	// Pending is set when the marker is missing, of the wrong type or
	// another server's (a restart or failover): the next acquisition
	// starts a quarantine.
	Pending bool
}

// LossOf returns the loss marker of session id's slot, ok false when it
// was not read (the session is held, or past MaxLossSlots).
func (s *Snapshot) LossOf(id string) (Loss, bool) {
	if s.slotOf == nil {
		return Loss{}, false
	}
	l, ok := s.loss[s.slotOf(id)]
	if !ok {
		return Loss{}, false
	}
	return *l, true
}

// QuarantineOf says whether session id's slot waits out the loss
// quarantine (a new keyspace, or Redis lost data): its free lease is not
// taken, a wait and not a failure.
func (s *Snapshot) QuarantineOf(id string) Quarantine {
	l, ok := s.LossOf(id)
	switch {
	case !ok:
		return Quarantine{}
	case !l.Present || l.WrongType || l.Restarted():
		return Quarantine{Waits: true, Pending: true}
	case l.Marker.QuarantineLeft(s.ServerTime) > 0:
		return Quarantine{Waits: true, Left: l.Marker.QuarantineLeft(s.ServerTime)}
	}
	return Quarantine{}
}

// Quarantined sums up the quarantine of the unowned active sessions read.
type Quarantined struct {
	// Sessions are those that wait, in Order.
	Sessions []string
	// Left is the longest quarantine left among them; 0 when each one
	// starts at the next acquisition.
	Left time.Duration
	// Pending is set when some starts at the next acquisition.
	Pending bool
}

// Quarantined returns the unowned active sessions read that wait out the
// loss quarantine (those no worker matches wait for a worker instead).
func (s *Snapshot) Quarantined() Quarantined {
	var q Quarantined
	for _, id := range s.unowned(s.Active()) {
		if w := s.QuarantineOf(id); w.Waits && s.Placeable(id) {
			q.Sessions = append(q.Sessions, id)
			q.Left = max(q.Left, w.Left)
			q.Pending = q.Pending || w.Pending
		}
	}
	return q
}

// acquiredAt is when the lease of owner value owner was taken, now being
// the server's time: when token was minted (the token of the session's
// fencing record, the lease's where there is one), else when the holder
// made the owner value, within a day before now (a second ahead of now
// counts as now: the holder's clock may run a little ahead).
func acquiredAt(token int64, owner string, now time.Time) (time.Time, bool) {
	if at, ok := lease.MintedAt(token, now); ok {
		return at, true
	}
	made := lease.ParseOwner(owner).Made
	if made.IsZero() || now.Sub(made) > 24*time.Hour || made.Sub(now) > time.Second {
		return time.Time{}, false
	}
	if made.After(now) {
		made = now
	}
	return made, true
}

// Placed returns the active sessions read that some live worker may poll
// (Active without the unplaceable ones), in Order: those whose leases
// Check verifies.
func (s *Snapshot) Placed() []string {
	var out []string
	for _, id := range s.Active() {
		if s.Placeable(id) {
			out = append(out, id)
		}
	}
	return out
}

// Definitions returns the valid definitions read, in Order.
func (s *Snapshot) Definitions() []session.Session {
	var out []session.Session
	for _, id := range s.Order {
		if f := s.Sessions[id]; f.Session != nil {
			out = append(out, *f.Session)
		}
	}
	return out
}

// Known reports whether id was read and is stored (valid or malformed).
func (s *Snapshot) Known(id string) bool {
	f, ok := s.Sessions[id]
	return ok && f.Found
}
