package history

import (
	"maps"
	"time"
)

// LeaseChange is one change of a session's lease holder, as the worker
// reported it.
type LeaseChange struct {
	At      time.Time
	Session string
	Worker  string
	// Held is true when Worker acquired (or recovered) the lease, false
	// when it released, lost it, or stopped being sure of it.
	Held bool
}

// Holders replays changes, which must be in the order they were recorded:
// it returns the worker that held each session's lease after the last
// change at or before t, by session. A change with Held false removes a
// holder only if it is that change's worker (a late release by the
// previous holder does not erase the new one).
func Holders(changes []LeaseChange, t time.Time) map[string]string {
	var h Holding
	for _, c := range changes {
		if c.At.After(t) {
			break
		}
		h.Apply(c)
	}
	return h.Map()
}

// Holding is the lease holders of a set of sessions, kept up to date
// change by change (what Holders computes at once). The zero value holds
// nothing. It is not safe for concurrent use.
type Holding struct {
	holder map[string]string // session -> worker
}

// Apply applies one change.
func (h *Holding) Apply(c LeaseChange) {
	if c.Held {
		if h.holder == nil {
			h.holder = make(map[string]string)
		}
		h.holder[c.Session] = c.Worker
		return
	}
	if h.holder[c.Session] == c.Worker {
		delete(h.holder, c.Session)
	}
}

// Map returns a copy of the holders, by session.
func (h *Holding) Map() map[string]string {
	if h.holder == nil {
		return map[string]string{}
	}
	return maps.Clone(h.holder)
}

// Counts returns how many sessions each worker holds.
func (h *Holding) Counts() map[string]int {
	return CountBy(h.holder)
}

// CountBy returns how many sessions each worker holds in holders (session
// -> worker).
func CountBy(holders map[string]string) map[string]int {
	n := make(map[string]int)
	for _, w := range holders {
		n[w]++
	}
	return n
}
