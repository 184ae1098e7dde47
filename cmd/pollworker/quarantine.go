package main

import (
	"github.com/pollworker/pollworker/fleet"
)

// quarantineView is what the loss markers say about the unowned active
// sessions (fleet.Snapshot.Quarantined): how many wait out a loss
// quarantine (nobody takes a free lease in their hash slot: a new
// keyspace, or Redis lost data), a wait and not a failure.
type quarantineView struct {
	// Count is the number of sessions that wait.
	Count int `json:"count"`
	// LeftMs is the longest quarantine left among them; 0 when each one
	// starts at the next acquisition.
	LeftMs int64 `json:"left_ms"`
	// Pending is set when some marker is missing or another server's:
	// the quarantine starts at the next acquisition.
	Pending bool `json:"pending"`

	q fleet.Quarantined
}

// quarantineOf sums up what the snapshot's loss markers say.
func quarantineOf(s *fleet.Snapshot) quarantineView {
	q := s.Quarantined()
	return quarantineView{Count: len(q.Sessions), LeftMs: q.Left.Milliseconds(), Pending: q.Pending, q: q}
}

// text says it in one line.
func (q quarantineView) text() string { return q.q.Text() }
