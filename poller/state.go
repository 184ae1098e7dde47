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

// prepareState loads l's state before its first poll under its lease, and
// reports whether l polls now; if not, end is how its turn ends. After a
// crash (no graceful handoff mark, so the lease does not say when the next
// poll was due) a saved record whose poll was due less than an interval
// ago puts the first poll one interval after that due time, on this
// worker's clock, instead of now: the session keeps its schedule (end.at,
// deferSlack earlier, moved by the spread step as the predecessor's
// schedule would have been). Otherwise the first poll is paced
// (scheduler.Pace). A load that fails is a failed poll (retried at the
// next one, after the backoff); the poller never runs without its state.
// A corrupt state is not a failure: it reads as never saved (the poll goes
// on as for a new session) and is reported once (noteState).
func (c *Coordinator) prepareState(ctx context.Context, l *pollLoop, now time.Time) (end turnEnd, pollNow bool) {
	st := l.state
	st.mu.Lock()
	loaded := st.loaded
	st.mu.Unlock()
	if loaded {
		return turnEnd{}, true
	}
	// The loops of sessions taken together load together: their calls
	// are coalesced into LoadMany pipelines.
	rctx, cancel := c.requestCtx(ctx)
	rec, err := st.store.LoadBatched(rctx, l.sess.ID)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return turnEnd{out: pollCancelled}, false
		}
		c.cfg.Observer.RedisError("state")
		c.log.Warn("state load failed; the poll waits for it", zap.String("session", l.sess.ID), zap.Error(err))
		return turnEnd{out: pollFailed}, false
	}
	c.noteState(l.sess.ID, rec.Corrupt) // a corrupt state reads as never saved
	st.mu.Lock()
	st.loaded, st.last = true, rec.Compact()
	st.mu.Unlock()
	if _, handed := l.lease.NextPoll(); handed || l.polled.Load() {
		return turnEnd{}, true // the handoff mark or the previous loop set the schedule
	}
	iv := l.sess.Interval.D()
	if since, ok := rec.SincePolled(); ok && since >= 0 && since < iv {
		// The load's reply arrived just now: the saved poll was due `since` ago.
		if at := c.cfg.Clock.Now().Add(iv - since); at.After(now) {
			return turnEnd{out: pollCancelled, at: at.Add(-deferSlack)}, false
		}
	}
	at, paceNow := c.sched.Pace(l)
	if paceNow {
		return turnEnd{}, true
	}
	return turnEnd{out: pollCancelled, at: at, exact: true}, false
}

// deferSlack is how much earlier than the saved schedule a deferred first
// poll is put before the spread step: `at`, carried in ms through Redis,
// is within a millisecond or two of the session's phase when the
// predecessor's due times were on it, and the slack keeps the step from
// taking it one whole step past.
const deferSlack = 5 * time.Millisecond
