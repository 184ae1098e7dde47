package main

import (
	"slices"
	"sync"
	"time"

	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/poller"
)

// failingSession is a session this worker polls whose last poll failed,
// as the status page lists it.
type failingSession struct {
	// Worker is the worker that polls it (on the fleet's table).
	Worker string `json:"worker,omitempty"`
	// Session is the session id.
	Session string
	// Failures counts the polls that failed in a row (httppoll.State.Failures).
	Failures int
	// Status is the last poll's HTTP status; 0 when no response arrived.
	Status int
	// Error is the last failure's class (httppoll.State.Error).
	Error string
	// Message is the last failure's message (httppoll.State.Message).
	Message string
	// Since is when the first of those failures started.
	Since time.Time
	// LastPoll is when the last poll started.
	LastPoll time.Time
	// Token is the fencing token of the lease polled under; 0 without one.
	Token int64
}

// failing is the status page's table of the sessions whose last poll
// failed (an httppoll.FailureTracker, told by the worker's Poller), with the lease
// they were polled under: a session whose lease has ended (handed off,
// lost) is no longer this worker's to show and is forgotten. It holds
// failing sessions only, so a worker whose sessions succeed keeps nothing.
type failing struct {
	mu       sync.Mutex
	sessions map[string]failingEntry
	sweepAt  int // sweep ended leases out once the map has this many entries
}

type failingEntry struct {
	failingSession
	turn *poller.Turn // the last poll's: its lease's token, whether it ended; nil for polls outside a Coordinator
}

// minSweep is the size below which failing never sweeps.
const minSweep = 64

func newFailing() *failing {
	return &failing{sessions: make(map[string]failingEntry), sweepAt: minSweep}
}

var _ httppoll.FailureTracker = (*failing)(nil)

// Update records the outcome of a poll of id (its Turn t): st is the
// session's state after it.
func (f *failing) Update(id string, t *poller.Turn, st httppoll.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st.Failures == 0 {
		delete(f.sessions, id)
		return
	}
	e := failingEntry{turn: t, failingSession: failingSession{Session: id, Failures: st.Failures, Status: st.Status,
		Error: st.Error, Message: st.Message, Since: st.FailingSince, LastPoll: st.Polled}}
	if t != nil {
		e.Token = t.Token()
	}
	f.sessions[id] = e
	if len(f.sessions) >= f.sweepAt {
		f.sweepLocked()
		f.sweepAt = max(2*len(f.sessions), minSweep)
	}
}

// Failures is the count of failures in a row of id's polls under t's
// lease (its token), for a poll without saved state: 0 unless the last
// poll under that lease failed.
func (f *failing) Failures(id string, t *poller.Turn) (n int, since time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.sessions[id]
	var token int64
	if t != nil {
		token = t.Token()
	}
	if !ok || e.Token != token {
		return 0, time.Time{}
	}
	return e.Failures, e.Since
}

// list returns the failing sessions whose lease has not ended, those
// failing longest first.
func (f *failing) list() []failingSession {
	f.mu.Lock()
	f.sweepLocked()
	out := make([]failingSession, 0, len(f.sessions))
	for _, e := range f.sessions {
		out = append(out, e.failingSession)
	}
	f.mu.Unlock()
	slices.SortFunc(out, byFailingSince)
	return out
}

// sweepLocked forgets the sessions whose lease has ended.
func (f *failing) sweepLocked() {
	for id, e := range f.sessions {
		if e.turn != nil && e.turn.Ended() {
			delete(f.sessions, id)
		}
	}
}
