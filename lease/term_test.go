package lease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTermCancelsChildren: contexts derived from a term end with it, and a
// child that ends first leaves nothing registered in the term.
func TestTermCancelsChildren(t *testing.T) {
	tm := newTerm()
	require.NoError(t, tm.Err())

	done, cancelDone := context.WithCancel(tm)
	cancelDone() // a poll that ended: unregistered
	tm.mu.Lock()
	require.Nil(t, tm.after, "an ended child leaves nothing in the term")
	tm.mu.Unlock()

	child, cancelChild := context.WithCancel(tm)
	defer cancelChild()
	timed, cancelTimed := context.WithTimeout(child, time.Hour)
	defer cancelTimed()
	ran := make(chan struct{})
	stop := context.AfterFunc(tm, func() { close(ran) })
	defer stop()
	require.NoError(t, child.Err())

	tm.cancel()
	tm.cancel() // a second cancel does nothing
	require.ErrorIs(t, tm.Err(), context.Canceled)
	require.ErrorIs(t, child.Err(), context.Canceled, "cancelled with the term, synchronously")
	require.ErrorIs(t, context.Cause(child), context.Canceled)
	require.ErrorIs(t, timed.Err(), context.Canceled)
	require.ErrorIs(t, done.Err(), context.Canceled)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("context.AfterFunc did not run")
	}

	// Derived from a cancelled term: done at once.
	late, cancelLate := context.WithCancel(tm)
	defer cancelLate()
	require.ErrorIs(t, late.Err(), context.Canceled)
	ranLate := make(chan struct{})
	require.False(t, tm.AfterFunc(func() { close(ranLate) })())
	select {
	case <-ranLate:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc on a cancelled term did not run")
	}
}
