package lease

import (
	"context"
	"sync"
	"time"
)

// State is where a lease stands as seen by its holder.
type State int

// The states of a lease. Only Held allows polling.
const (
	// Held: the last acquire or renew succeeded and its deadline has not passed.
	Held State = iota + 1
	// Uncertain: a renewal failed or timed out; polling stops at once, the
	// lease may come back to Held if a renewal succeeds before the deadline.
	Uncertain
	// Lost: the deadline passed or Redis said another owner holds the key.
	Lost
	// Released: the holder gave the lease up (handoff or shutdown).
	Released
)

// String names the state.
func (s State) String() string {
	switch s {
	case Held:
		return "held"
	case Uncertain:
		return "uncertain"
	case Lost:
		return "lost"
	case Released:
		return "released"
	}
	return "unknown"
}

// Lease is one acquisition of one session's lease. Its fencing token and
// owner value never change; its deadline moves forward with each renewal.
type Lease struct {
	session string
	token   int64
	// The lease key (built once) and the owner value, boxed once at
	// acquisition so that a renewal cycle, which passes them as script
	// arguments, allocates nothing per lease; always strings (key, Owner).
	keyArg, ownerArg any
	gap              time.Duration // release -> this acquisition, in Redis; -1 if no graceful release
	acquired         time.Time     // local: when the acquire reply arrived
	nextPollIn       time.Duration // acquired -> when the previous holder's next poll was due; negative if unknown

	mu       sync.Mutex
	state    State
	deadline time.Time // local, monotonic: send time + TTL - drift
	// term is the context of the current Held term, made when first asked
	// for (Context) so that a lease nobody asks costs none: nil until then;
	// once the term ended, the cancelled one, or nil when none was made
	// (Context then makes one already cancelled).
	term    *term
	onEnd   *termHook     // run when the current Held term ends (AfterTerm); a list, newest first
	changed chan struct{} // closed at the next state change; made when first asked for
	reason  string
	group   *expiryGroup // the timer that ends the lease at its deadline; nil once Lost or Released

	slot int // position in Manager.list while listed; guarded by Manager.mu
}

// Session is the id of the leased session.
func (l *Lease) Session() string { return l.session }

// Token is the fencing token of this acquisition: strictly greater than the
// token of every earlier acquisition of the same session.
func (l *Lease) Token() int64 { return l.token }

// Owner is the unique value stored in the lease key for this acquisition.
func (l *Lease) Owner() string { return l.ownerArg.(string) }

// key is the lease key.
func (l *Lease) key() string { return l.keyArg.(string) }

// State is the current state.
func (l *Lease) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// Reason says why the lease last left Held ("" while held).
func (l *Lease) Reason() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reason
}

// Deadline is the local (monotonic) instant after which the holder must
// assume the lease is gone.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Context returns the context of the current term: it is cancelled the
// moment the lease stops being Held (uncertain, lost, released or past its
// deadline). After a return to Held a new context is returned. It is made
// when first asked for; AfterTerm ties work to the term without it.
func (l *Lease) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.term == nil {
		l.term = newTerm()
		if l.state != Held {
			l.term.cancel()
		}
	}
	return l.term
}

// termHook is one function registered with AfterTerm.
type termHook struct {
	f    func()
	next *termHook
}

// AfterTerm arranges for f to run the moment the current Held term ends,
// without making the term's context (a channel and a lock, for as long as
// the term lasts). Unlike context.AfterFunc(l.Context(), f), it refuses a
// term that has ended: ok is false, and f never runs, when the lease is
// not Held. f runs on the
// goroutine that ends the term with the lease's lock held: it must be
// quick and must not call the lease (a context's cancel func is both).
// stop unregisters f and reports whether it did so before f ran.
func (l *Lease) AfterTerm(f func()) (stop func() bool, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != Held {
		return func() bool { return false }, false
	}
	h := &termHook{f: f, next: l.onEnd}
	l.onEnd = h
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for p := &l.onEnd; *p != nil; p = &(*p).next {
			if *p == h {
				*p = h.next
				return true
			}
		}
		return false // ran, or its term ended
	}, true
}

// Changed returns a channel closed at the next state change.
func (l *Lease) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// setLocked moves the lease to st; it ends the term when leaving Held
// (cancels its context, runs the AfterTerm functions) and opens a new one
// when entering Held. Caller holds l.mu.
func (l *Lease) setLocked(st State, reason string) bool {
	if l.state == st || l.state == Lost || l.state == Released {
		return false
	}
	if l.state == Held {
		if l.term != nil {
			l.term.cancel()
		}
		for h := l.onEnd; h != nil; h = h.next {
			h.f()
		}
		l.onEnd = nil
	}
	if st == Held {
		l.term = nil // made when asked for (Context)
		reason = ""
	}
	if st == Lost || st == Released {
		l.leaveGroupLocked()
	}
	l.state, l.reason = st, reason
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	return true
}
