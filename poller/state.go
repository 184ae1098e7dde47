package poller

import (
	"context"
	"sync"
	"time"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/state"
)

// SessionState is the fenced state of the session a poll runs for, under the
// poll's lease (Turn.State, with Config.Stateful). It is read from Redis
// before the first poll under a lease (after the acquisition, so it holds
// every earlier holder's last save) and then kept in memory: Last is what
// was loaded or saved last. A SessionState belongs to one lease and is valid
// during the Poll call whose Turn gives it; its methods are safe for
// concurrent use.
type SessionState struct {
	store   *state.Store
	lease   *lease.Lease
	notHeld func(*lease.Lease, error) // turns.notHeld: a Save that proved the lease lost ends it

	mu       sync.Mutex
	loaded   bool
	last     state.Compact // as Last returns it; a worker keeps one per held session
	polledAt time.Time     // start of the poll running (coordinator's clock)
	decoded  *decodedState // Decoded's value for last; nil until asked, and after last changes
}

// decodedState is what Decoded's decode returned for one record.
type decodedState struct {
	v   any
	err error
}

// Last returns the last saved record of the session: as loaded before the
// first poll under this lease, or as written by the last successful Save.
// A session never saved has a Record with Token 0 and nil Data.
func (st *SessionState) Last() state.Record {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.last.Record()
}

// Save writes data as the session's state, fenced by the poll's lease
// (state.Store.Save): it fails with state.ErrStale when the lease is no
// longer this worker's in Redis or a newer token wrote the state, with
// state.ErrTooLarge when data is over the size limit (nothing written,
// nothing lost), and with Redis's error when the outcome is unknown. The
// record carries the start of the poll that saves, so that a successor
// after a crash keeps the session's schedule. Errors are returned, never
// hidden; Last changes only on success.
func (st *SessionState) Save(ctx context.Context, data []byte) error {
	st.mu.Lock()
	polledAt := st.polledAt
	st.mu.Unlock()
	rec, err := st.store.Save(ctx, st.lease, polledAt, data)
	if err != nil {
		if st.notHeld != nil {
			st.notHeld(st.lease, err)
		}
		return err
	}
	st.mu.Lock()
	if rec.Token >= st.last.Token() {
		st.setLast(rec)
	}
	st.mu.Unlock()
	return nil
}

// Decoded returns Last and what decode returns for its Data, calling decode
// once per record: the value (or error) is kept until the record changes,
// by a Save or the load before the first poll. A Poller that keeps its
// state encoded decodes it once, not at every poll. decode runs with the
// SessionState locked and must not call its methods; one SessionState
// takes one decode function (a value kept is not told apart by function).
func (st *SessionState) Decoded(decode func(data []byte) (any, error)) (state.Record, any, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.decoded == nil {
		v, err := decode(st.last.Record().Data)
		st.decoded = &decodedState{v, err}
	}
	return st.last.Record(), st.decoded.v, st.decoded.err
}

// setLast makes rec the last record, forgetting what was decoded from the
// one before. st.mu is held.
func (st *SessionState) setLast(rec state.Record) {
	st.last, st.decoded = rec.Compact(), nil
}
