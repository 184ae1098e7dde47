package poller

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// StatefulPoller is a Poller that keeps per-session state across polls,
// handoffs and crashes. When Config.Poller implements it, the coordinator
// calls PollState instead of Poll, with the session's State: the record
// saved last (by this worker or any earlier holder of the session) and a
// fenced way to save the next one. Everything said of Poll holds for
// PollState.
type StatefulPoller interface {
	PollState(ctx context.Context, s session.Session, l *lease.Lease, st *State) error
}

// State is the fenced state of the session a poll runs for, under the
// poll's lease. It is read from Redis before the first poll under a lease
// (after the acquisition, so it holds every earlier holder's last save)
// and then kept in memory: Last is what was loaded or saved last. A State
// belongs to one lease and is valid during the PollState call it is given
// to; its methods are safe for concurrent use.
type State struct {
	store *state.Store
	lease *lease.Lease

	mu       sync.Mutex
	loaded   bool
	last     state.Compact // as Last returns it; a worker keeps one per held session
	polledAt time.Time     // start of the poll running (coordinator's clock)
}

// Last returns the last saved record of the session: as loaded before the
// first poll under this lease, or as written by the last successful Save.
// A session never saved has a Record with Token 0 and nil Data.
func (st *State) Last() state.Record {
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
func (st *State) Save(ctx context.Context, data []byte) error {
	st.mu.Lock()
	polledAt := st.polledAt
	st.mu.Unlock()
	rec, err := st.store.Save(ctx, st.lease, polledAt, data)
	if err != nil {
		return err
	}
	st.mu.Lock()
	if rec.Token >= st.last.Token() {
		st.last = rec.Compact()
	}
	st.mu.Unlock()
	return nil
}

// stateful returns the StatefulPoller of c, nil when the Poller is not one.
func (c *Coordinator) stateful() StatefulPoller {
	sp, _ := c.cfg.Poller.(StatefulPoller)
	return sp
}

// prepareState loads w's state before its first poll under its lease, and
// reports whether w should poll now. After a crash (no graceful handoff
// mark, so the lease does not say when the next poll was due) a saved
// record whose poll was due less than an interval ago puts the first poll
// one interval after that due time, on this worker's clock, instead of
// now: the session keeps its schedule. Then it returns false, having moved w's next
// poll there (deferPoll). A load that fails is a failed poll (retried at
// the next one, after the backoff); the poller never runs without its
// state. A corrupt state is not a failure: it reads as never saved (the
// poll goes on as for a new session) and is reported once (noteState).
func (c *Coordinator) prepareState(w *worker, now time.Time) (pollNow, failed bool) {
	st := w.state
	st.mu.Lock()
	loaded := st.loaded
	st.mu.Unlock()
	if loaded {
		return true, false
	}
	// The loops of sessions taken together load together: their calls
	// are coalesced into LoadMany pipelines.
	rctx, cancel := c.requestCtx(w.ctx)
	rec, err := st.store.LoadBatched(rctx, w.sess.ID)
	cancel()
	if err != nil {
		if w.ctx.Err() == nil {
			c.cfg.Observer.RedisError("state")
			c.log.Warn("state load failed; the poll waits for it", zap.String("session", w.sess.ID), zap.Error(err))
		}
		return false, w.ctx.Err() == nil
	}
	c.noteState(w.sess.ID, rec.Corrupt) // a corrupt state reads as never saved
	st.mu.Lock()
	st.loaded, st.last = true, rec.Compact()
	st.mu.Unlock()
	if _, handed := w.lease.NextPoll(); handed || w.polled.Load() || w.slots != nil {
		return true, false // the handoff mark, the previous loop or the slots set the schedule
	}
	since, ok := rec.SincePolled()
	iv := w.sess.Interval.D()
	if !ok || since < 0 || since >= iv {
		return c.sched.paceFirst(w), false
	}
	// The load's reply arrived just now: the saved poll was due `since` ago.
	at := c.cfg.Clock.Now().Add(iv - since)
	if !at.After(now) {
		return c.sched.paceFirst(w), false
	}
	c.sched.deferPoll(w, at)
	return false, false
}

// deferPoll makes the settling of w after its current turn (polled, with a
// success) put its next poll at `at` rather than one interval after the
// turn's due time: w.next is moved one interval (and deferSlack) before
// `at`, so that the scheduler's next = w.next + interval, moved later by
// its spread step toward the session's phase, is where the previous
// holder's own schedule would have put it: on `at` when its due times were
// on the phase already (`at`, carried in ms through Redis, is then within
// a millisecond or two of the phase, and the slack keeps the step from
// taking it one whole step past), else one step (at most min(interval/10,
// 200ms)) later, as its next poll would have been. Called from w's poll
// goroutine.
func (s *scheduler) deferPoll(w *worker, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.next = at.Add(-w.sess.Interval.D() - deferSlack)
}

// deferSlack is how much earlier than the saved schedule a deferred first
// poll is put before the spread step (see deferPoll).
const deferSlack = 5 * time.Millisecond
