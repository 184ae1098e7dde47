package poller

import (
	"context"
	"time"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// Poller polls one session; it is the one way the Coordinator calls the
// embedder's code. Poll is called on the session's interval (or at its
// schedule's slots), only while this worker holds the session's lease,
// with the Turn of that poll; ctx is cancelled the moment the lease
// becomes uncertain or lost, the session is paused or removed, or the
// drain's DrainTimeout has passed; a handoff lets the poll finish (the
// lease is released after it returned). Poll must return
// promptly once ctx is done: a poll that outlives its lease may overlap
// with the next holder's (the fencing token is the target's guard), and
// at Run's drain it is abandoned after DrainTimeout. A panic in Poll is
// recovered, counted and backed off like an error; it does not stop
// other sessions. Polls of
// different sessions run concurrently on the scheduler's goroutines; two
// polls of one session never overlap in one Coordinator.
type Poller interface {
	Poll(ctx context.Context, t *Turn) error
}

// PollFunc adapts a function to Poller.
type PollFunc func(ctx context.Context, t *Turn) error

// Poll calls f.
func (f PollFunc) Poll(ctx context.Context, t *Turn) error {
	return f(ctx, t)
}

// Turn is one poll of one session under this worker's lease on it: the
// session's definition, what the poll may need of the lease (the fencing
// token to hand downstream, the worker's id, the lease's local deadline),
// read only, and the session's fenced state when Config.Stateful is set.
// Nothing in a Turn renews, releases or abandons the lease: the
// Coordinator does, after Poll returns. Its methods are safe for
// concurrent use and may be called after Poll returned (Ended then says
// whether the lease has moved on).
type Turn struct {
	sess  *session.Session // never changed in place (pollLoop.sess)
	lease *lease.Lease     // nil: a poll outside a lease (NewTurn)
	state *SessionState    // nil without Config.Stateful
}

// NewTurn returns the Turn of a poll of s under l with state st, for
// tests of a Poller and for calling one outside a Coordinator. l may be
// nil (a poll without a lease: token 0, no worker, no deadline); st may
// be nil (no state).
func NewTurn(s session.Session, l *lease.Lease, st *SessionState) *Turn {
	return &Turn{sess: &s, lease: l, state: st}
}

// Session is the definition of the session polled, as of the poll's start.
func (t *Turn) Session() session.Session { return *t.sess }

// Token is the fencing token of the lease the poll runs under, to hand to
// downstream systems so that they reject a stale holder's requests; it
// never goes backwards for a session. It is 0 without a lease.
func (t *Turn) Token() int64 {
	if t.lease == nil {
		return 0
	}
	return t.lease.Token()
}

// Worker is the id of the worker holding the lease ("" without a lease).
func (t *Turn) Worker() string {
	if t.lease == nil {
		return ""
	}
	return lease.HolderOf(t.lease.Owner())
}

// Deadline is the lease's local deadline now (monotonic clock, drift
// margin taken off): renewals move it on; ctx is cancelled at the latest
// then. It is the zero time without a lease.
func (t *Turn) Deadline() time.Time {
	if t.lease == nil {
		return time.Time{}
	}
	return t.lease.Deadline()
}

// Ended reports whether the lease the poll ran under has ended (released
// or lost): from then on the session is no longer this term's to report
// on. It is false without a lease.
func (t *Turn) Ended() bool {
	if t.lease == nil {
		return false
	}
	st := t.lease.State()
	return st == lease.Lost || st == lease.Released
}

// State is the session's fenced state under the poll's lease, loaded
// before the first poll under it: nil unless Config.Stateful is set.
func (t *Turn) State() *SessionState { return t.state }
