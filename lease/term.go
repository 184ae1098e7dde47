package lease

import (
	"context"
	"sync"
	"time"
)

// term is the context of one Held term of a lease (Lease.Context, made
// only when asked for: the poller uses Lease.AfterTerm instead): done when
// cancel is called, with context.Canceled. It is a context of its own
// rather than context.WithCancel because it may last as long as a lease is
// held: the standard cancelCtx keeps a map of its children, allocated at
// the first child and never freed while the term lasts. term registers its
// children through AfterFunc instead (context.WithCancel and
// context.AfterFunc use it for a parent that has it), in a slice that is
// dropped when it empties.
type term struct {
	done chan struct{}

	mu    sync.Mutex
	err   error       // nil until cancelled
	after []*afterRun // functions to run when cancelled; nil when none
}

// afterRun is one function registered with term.AfterFunc.
type afterRun struct{ f func() }

var _ context.Context = (*term)(nil)

// newTerm returns a term that is not cancelled.
func newTerm() *term { return &term{done: make(chan struct{})} }

// Deadline reports no deadline: the lease's deadline ends the term through
// cancel.
func (*term) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is closed when the term is cancelled.
func (t *term) Done() <-chan struct{} { return t.done }

// Err is context.Canceled once the term is cancelled, nil before.
func (t *term) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Value carries no values.
func (*term) Value(any) any { return nil }

// AfterFunc arranges for f to run, in the goroutine that cancels the term,
// when it is cancelled (at once, in a goroutine of its own, if it is
// already). stop unregisters f and reports whether it did so before f ran.
// This is the method context.WithCancel and context.AfterFunc look for on
// a parent.
func (t *term) AfterFunc(f func()) (stop func() bool) {
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	r := &afterRun{f: f}
	t.after = append(t.after, r)
	t.mu.Unlock()
	return func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		for i, a := range t.after {
			if a == r {
				last := len(t.after) - 1
				t.after[i] = t.after[last]
				t.after[last] = nil
				t.after = t.after[:last]
				if last == 0 {
					t.after = nil // nothing kept while no poll runs
				}
				return true
			}
		}
		return false
	}
}

// cancel ends the term: Done is closed, Err returns context.Canceled, and
// the registered functions run. Later calls do nothing.
func (t *term) cancel() {
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return
	}
	t.err = context.Canceled
	after := t.after
	t.after = nil
	close(t.done)
	t.mu.Unlock()
	for _, a := range after {
		a.f()
	}
}
