package poller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// holdings keeps the sessions this worker holds: it takes their leases
// (take, adoptOrphans: acquire.go), starts their poll loops in the
// scheduler, restarts, stops and reaps them, and releases their leases
// once their polls returned, handing their schedules on. Owned by the
// main loop (and the drain after it); its collaborators are set by New.
type holdings struct {
	held     map[string]*hold // the sessions held, by id: their poll loops and what the round decided of them
	sched    *scheduler       // runs the held sessions' poll loops
	leases   *lease.Manager
	turns    *turns     // a loop's state and slots
	view     *view      // the definitions it acquires and starts with
	claims   *claims    // contended sessions, orphans, the retry timer
	news     *news      // peer news stops a long acquire
	health   *health    // an acquire of unknown outcome is Redis unreachable
	announce *announcer // releases are announced
	clock    clock.WithTickerAndDelayedExecution
	timeout  time.Duration // Config.RequestTimeout
	log      *zap.Logger
	obs      Observer
}

// start starts the poll loop of s under l. Its first poll is now
// (paced when many start together: scheduler.paceLocked), unless l was
// handed over gracefully by a holder whose next poll of s was due later:
// then it keeps that schedule, so a handoff never polls a session early.
func (ho *holdings) start(s *session.Session, l *lease.Lease) {
	ho.startAt(s, l, new(atomic.Bool), time.Time{})
}

// startAt starts the poll loop of s under l; polled says whether a
// poll already began under l (a loop restarted for a new definition),
// and keep, if set, when its first poll is due (restartDue).
func (ho *holdings) startAt(s *session.Session, l *lease.Lease, polled *atomic.Bool, keep time.Time) {
	pl := &pollLoop{sess: s, lease: l, polled: polled}
	if ho.turns.stateful {
		pl.state = &SessionState{store: ho.turns.states, lease: l, notHeld: ho.turns.notHeld}
	}
	bound := FirstPollBound(s.Interval.D())
	if s.Scheduled() {
		pl.slots, bound = ho.turns.newSlotLoop(s, l)
	}
	// Zero without a handoff: the first poll is paced (scheduler.paceLocked).
	due, _ := l.NextPollWithin(bound)
	switch {
	case !keep.IsZero():
		due = keep // a restart keeps the schedule (restartDue)
	case polled.Load() || (due.IsZero() && pl.state != nil):
		// A restart polls with the new definition at once; a stateful
		// loop loads its state first and is paced then (scheduler.Pace, from prepareState).
		due = ho.clock.Now()
	}
	ho.held[s.ID] = &hold{loop: pl, sess: s, acquired: l.Acquired(), members: ho.view.members.Version}
	ho.sched.Start(pl, due)
}

// restartDue is when the loop of a session redefined from old to s, whose
// next poll was due at next and whose last poll began at began (zero:
// none), polls first under its new definition: at once when what it sends
// changed (its URL or request) or it runs on a schedule (its slots decide
// which is due); else at next, or, its interval changed, one new interval
// after its last poll began (next may hold up to a tenth of the old
// interval of spread step: SpreadStep); never before now. So a change of
// labels, selector or interval adds no poll: a GitOps loop relabelling
// many sessions does not send each of them an extra request.
func restartDue(old, s *session.Session, next, began, now time.Time) time.Time {
	if next.IsZero() || old.Scheduled() || s.Scheduled() || old.URL != s.URL || !old.SameRequest(*s) {
		return now
	}
	if iv := s.Interval.D(); iv != old.Interval.D() {
		if began.IsZero() {
			return now
		}
		next = began.Add(iv)
	}
	return maxTime(next, now)
}

// forget forgets the held session id whose loop (h) exited.
func (ho *holdings) forget(id string, h *hold) {
	if ho.held[id] == h {
		delete(ho.held, id)
	}
	ho.sched.Forget(id, h.loop)
}

// stop ends h's loop after its current poll; the main loop releases
// the lease when the loop has exited (reap).
func (ho *holdings) stop(h *hold) {
	h.stopping = true
	h.restartAs = nil // a pending restart gives way: the lease is released
	ho.sched.Stop(h.loop)
}

// restart restarts the loop of the held session id, redefined as s,
// under the same lease once its current poll has finished (reap starts it
// again).
func (ho *holdings) restart(id string, s *session.Session) {
	h := ho.held[id]
	h.restartAs = s
	ho.sched.Stop(h.loop)
}

// handoffOf is what a successor of w's lease is told: the lease to release,
// and when w's next poll was due.
func (ho *holdings) handoffOf(w *pollLoop) lease.Handoff {
	return lease.Handoff{Lease: w.lease, NextPoll: ho.sched.DueOf(w)}
}

// stopAll stops every poll loop and hands the loops that have exited to
// release as they exit: at once those with no poll running (most of
// them), then each as its poll returns, so that one slow poll holds only
// its own session back (a drain released nothing until the slowest poll
// of the worker had returned). Once ctx is done it aborts the polls still
// running and waits for them abortGrace longer. The loops it handed on are
// forgotten; those still held after it returns ignored the abort.
func (ho *holdings) stopAll(ctx context.Context, release func([]lease.Handoff)) {
	for _, h := range ho.held {
		ho.stop(h)
	}
	// pass hands on the loops that have exited by now, and reports
	// whether any is still held.
	pass := func() bool {
		var exited []lease.Handoff
		for id, h := range ho.held {
			select {
			case <-ho.sched.Exited(h.loop):
				exited = append(exited, ho.handoffOf(h.loop))
				ho.forget(id, h)
			default:
			}
		}
		if len(exited) > 0 {
			release(exited)
		}
		return len(ho.held) > 0
	}
	// wait hands on the loops as they exit until none is held or ctx is
	// done; a loop's exit wakes it (schedConfig.Wake: news.trigger).
	wait := func(ctx context.Context) bool {
		for pass() {
			select {
			case <-ho.news.kick:
			case <-ctx.Done():
				return pass()
			}
		}
		return false
	}
	if !wait(ctx) {
		return
	}
	for _, h := range ho.held {
		ho.sched.Abort(h.loop)
	}
	grace, cancel := context.WithTimeout(context.Background(), abortGrace)
	defer cancel()
	wait(grace)
}

// abortGrace is how long a drain waits for aborted polls to return.
const abortGrace = time.Second

// release releases leases whose poll loops have exited, passing their
// poll schedules on, and tells the peers, so that a successor takes over at
// once and polls when the session is due. Many leases go in waves, soonest
// due first (firstReleaseWave, secondReleaseWave, then the rest), each
// announced as it is released: a successor takes the sessions due next
// while the rest are still being released, instead of after the whole
// release (~5 µs of Redis time a lease). Each wave has waveTimeout of its
// own. It returns how many leases the waves that succeeded released (a
// wave that failed counts none, though some of its leases may be released
// in Redis; the others expire by their TTL).
func (ho *holdings) release(ctx context.Context, hs []lease.Handoff, waveTimeout time.Duration) (released int, err error) {
	slices.SortFunc(hs, func(a, b lease.Handoff) int { return a.NextPoll.Compare(b.NextPoll) }) // unknown (zero) first
	var errs []error
	for wave := 0; len(hs) > 0; wave++ {
		n := len(hs)
		switch wave {
		case 0:
			n = min(n, firstReleaseWave)
		case 1:
			n = min(n, secondReleaseWave)
		}
		wctx, cancel := context.WithTimeout(ctx, waveTimeout)
		err := ho.releaseWave(wctx, hs[:n])
		cancel()
		if err != nil {
			errs = append(errs, err)
		} else {
			released += n
		}
		hs = hs[n:]
	}
	return released, errors.Join(errs...)
}

// The sizes of the first two waves of a release; the third takes the rest.
const (
	firstReleaseWave  = 256
	secondReleaseWave = 1024
)

// releaseWave releases hs and announces it.
func (ho *holdings) releaseWave(ctx context.Context, hs []lease.Handoff) error {
	ids := make([]string, len(hs))
	for i, h := range hs {
		ids[i] = h.Lease.Session()
	}
	if err := ho.leases.HandOff(ctx, hs...); err != nil {
		return fmt.Errorf("release %d leases: %w", len(hs), err)
	}
	if len(ids) > 100 {
		ids = nil // the peers read what changed
	}
	ho.announce.publish(ctx, nodes.EventRelease, ids)
	return nil
}

// reap handles the poll loops that have exited (decideExited): a
// loop restarted for a new session definition starts again under the same
// lease; a stopped loop's lease is released now that its poll has
// returned (and the peers are told); a loop that ended because its lease
// was lost is forgotten.
func (ho *holdings) reap(ctx context.Context) {
	var release []lease.Handoff
	for _, l := range ho.sched.Ended() {
		id := l.sess.ID
		h := ho.held[id]
		if h == nil || h.loop != l {
			continue // collected already (stopAll)
		}
		_, active := ho.view.sessions[id]
		ho.forget(id, h)
		delete(ho.claims.orphanSince, id)
		ho.view.touch(id) // lost ones may be taken again
		if st, ok := ho.view.buckets[keyspace.BucketOf(id)]; !ok || !st.assigned {
			// Kept only while polled here (an orphan, or a bucket no
			// longer read): its definition may be stale from now on.
			delete(ho.view.sessions, id)
		}
		switch decideExited(h, l.lease.State(), active) {
		case exitForget:
			ho.claims.watchOrphans() // lost: others' sessions may be adrift too
		case exitRestart:
			next, began := ho.sched.Times(l)
			ho.startAt(h.restartAs, l.lease, l.polled, restartDue(h.sess, h.restartAs, next, began, ho.clock.Now()))
		case exitRelease:
			// Paused or removed: the mark keeps no schedule for a successor.
			release = append(release, lease.Handoff{Lease: l.lease})
		case exitHandOff:
			release = append(release, ho.handoffOf(l))
		}
	}
	if len(release) == 0 {
		return
	}
	if _, err := ho.release(context.WithoutCancel(ctx), release, ho.timeout); err != nil {
		ho.obs.RedisError("release")
		ho.log.Warn("handoff release failed; leases expire by TTL", zap.Error(err))
	}
}
