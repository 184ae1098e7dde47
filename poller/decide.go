package poller

import (
	"maps"
	"slices"
	"time"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// A round reads, decides, then acts: refresh reads the world from Redis
// (I/O), decide says what to change (pure: no Redis, no clock read, no
// goroutine, no log), and the round applies it (stop, release, acquire,
// start, publish). The same holds for the steps a round takes on what it
// learns while it acts: decideAcquired on an acquire's results,
// decideOrphans on the leases nobody holds, decideExited on a poll loop
// that ended. Every rule of who polls what is decided here, and
// table-tested in decide_test.go (TestDecide*).

// world is what a round knows when it decides: this worker's standing, the
// active sessions it reads, the placement, and what changed since the last
// round.
type world struct {
	me     string
	labels nodes.Labels // this worker's labels (selectors)
	// live: a fresh heartbeat and Redis reachable with room
	// (health.isLive); member: counted live by its peers
	// (Membership.Contains). Only a live member takes sessions.
	live, member bool
	// cordoned: placed nothing (Membership.Placeable); it takes nothing
	// and hands off what it holds.
	cordoned bool
	// redisFull: Redis is over maxmemory, so no peer could take a handoff
	// (noteMemoryPressure).
	redisFull bool
	members   uint64                      // the membership version read
	sessions  map[string]*session.Session // the active sessions known (read this round, or held here)
	// owner returns the worker the placement prefers for a session ("" when
	// there is none: no live worker, or none whose labels match it).
	owner func(id string) string
	// full: look at every session; otherwise only at touched (and at the
	// contended sessions asked for again, and the orphans held).
	full     bool
	touched  map[string]struct{}
	released map[string]struct{} // peers that announced a release or a leave since the last round
	// leaseTTL is the settle time: a session is not moved twice within it
	// unless the membership changed. orphanGrace is how long an adopted
	// orphan stays before it goes back to its preferred worker.
	leaseTTL, orphanGrace time.Duration
	// share: count the sessions placed here that are not held yet
	// (actions.missing, for readiness).
	share bool
}

// matches reports whether this worker may poll s: its labels match the
// session's selector.
func (w *world) matches(s *session.Session) bool {
	return fleet.SelectorOf(*s).Matches(w.labels)
}

// hold is the main loop's record of one session it holds: the poll loop
// that the scheduler runs for it, and what the round decided of it. Owned
// by the main loop; the scheduler never reads it.
type hold struct {
	loop      *pollLoop        // the scheduler's record of the loop
	sess      *session.Session // the definition the loop polls with
	acquired  time.Time        // when the lease was acquired (local clock)
	members   uint64           // membership version when the loop started
	stopping  bool             // handed off: released once the loop exited
	restartAs *session.Session // start again with this definition once the loop exited (unless stopping)
}

// actions is what decide asks a round to do.
type actions struct {
	// stop are the held sessions to hand off (or give up: paused, removed,
	// not matched), sorted: the loop stops after its poll, the lease is
	// released once it exited.
	stop []string
	// abort are those of stop removed or paused, sorted: their running
	// poll is cancelled too (the user asked to stop polling them; a
	// handoff lets the poll finish).
	abort []string
	// restart are the held sessions redefined, sorted: the loop restarts
	// under the same lease with sessions[id] once its poll returned.
	restart []string
	// acquire are the sessions to take, sorted.
	acquire []string
	// uncontend are the contended sessions to ask for again: their holder
	// released or left, or its lease ran out.
	uncontend []string
	// retryAt is when the first lease still contended runs out (zero:
	// none); settleAt when the first session held back from a second move
	// may move (zero: none). The round asks for a round then.
	retryAt, settleAt time.Time
	// missing is the number of sessions placed here and not held (with
	// world.share).
	missing int
}

// decide says what a round changes: which held sessions stop or restart,
// which sessions to acquire, and which contended sessions to ask for
// again. The rules:
//
//   - hold rule: a held session stays unless it was removed or paused (its
//     running poll is cancelled too), its
//     selector no longer matches this worker, or another worker is
//     preferred for it and the move is settled: the membership changed
//     since the loop started, or it has been held one lease TTL (a session
//     is not moved twice within it for a change of sizes alone); one held
//     back is looked at again at settleAt. Nobody to hand to (no placeable
//     worker) or Redis full (nobody could take it) keeps it.
//   - orphans: a session adopted as an orphan goes back to its preferred
//     worker only after orphanGrace.
//   - a redefined session restarts under the same lease.
//   - acquire: a live member that is not cordoned takes the active
//     sessions placed on it that it matches, neither held nor contended.
//   - contention: a session another worker held is asked for again only
//     once that holder announced a release or left, or its lease ran out;
//     a session in the loss quarantine (no holder) only once the
//     quarantine ended.
func decide(w *world, cl *claims, held map[string]*hold, now time.Time) actions {
	var a actions
	look := w.touched // the sessions whose standing may have changed
	if !w.full {
		look = make(map[string]struct{}, len(w.touched)+len(cl.orphanSince))
		maps.Copy(look, w.touched)
		for id := range cl.orphanSince {
			look[id] = struct{}{} // handed back once orphanGrace has passed
		}
	}
	contended := a.decideContention(w, cl, now, look)
	for id, h := range held {
		if _, ok := look[id]; !w.full && !ok {
			continue
		}
		switch decideHold(w, cl, id, h, now, &a.settleAt) {
		case holdAbort:
			a.abort = append(a.abort, id)
			a.stop = append(a.stop, id)
		case holdStop:
			a.stop = append(a.stop, id)
		case holdRestart:
			a.restart = append(a.restart, id)
		}
	}
	slices.Sort(a.stop)
	slices.Sort(a.abort)
	slices.Sort(a.restart)
	if w.live && w.member {
		a.acquire = wanted(w, held, look, contended)
		if w.share {
			a.missing = missingShare(w, held)
		}
	}
	return a
}

// decideContention sets uncontend (added to look in a round that is not
// full) and retryAt, and returns the sessions still contended.
func (a *actions) decideContention(w *world, cl *claims, now time.Time, look map[string]struct{}) map[string]bool {
	still := make(map[string]bool, len(cl.contended))
	for id, ct := range cl.contended {
		_, released := w.released[ct.holder]
		if (released && ct.holder != "") || !now.Before(ct.until) {
			a.uncontend = append(a.uncontend, id)
			if !w.full {
				look[id] = struct{}{}
			}
			continue
		}
		still[id] = true
		a.retryAt = earliest(a.retryAt, ct.until)
	}
	slices.Sort(a.uncontend)
	return still
}

// wanted returns, sorted, the active sessions (all of them in a full
// round, else those in look) placed on this worker that it matches and
// neither holds nor finds contended; none while it is cordoned.
func wanted(w *world, held map[string]*hold, look map[string]struct{}, contended map[string]bool) []string {
	if w.cordoned {
		return nil
	}
	want := func(id string, s *session.Session) bool {
		_, running := held[id]
		return !running && !contended[id] && w.owner(id) == w.me && w.matches(s)
	}
	var out []string
	if w.full {
		for id, s := range w.sessions {
			if want(id, s) {
				out = append(out, id)
			}
		}
	} else {
		for id := range look {
			if s, ok := w.sessions[id]; ok && want(id, s) {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out
}

// missingShare counts the active sessions placed on this worker that it
// does not hold (readiness).
func missingShare(w *world, held map[string]*hold) int {
	n := 0
	for id := range w.sessions {
		if _, running := held[id]; !running && w.owner(id) == w.me {
			n++
		}
	}
	return n
}

// holdVerdict is what decideHold says of one held session.
type holdVerdict uint8

const (
	holdKeep    holdVerdict = iota // the loop goes on
	holdStop                       // stop the loop; release the lease once it exited
	holdAbort                      // stop the loop and cancel its running poll (removed or paused)
	holdRestart                    // restart the loop under the same lease with the new definition
)

// decideHold applies the hold rule (see decide) to the held session id,
// and moves settleAt earlier to when it may move if it is held back.
func decideHold(w *world, cl *claims, id string, h *hold, now time.Time, settleAt *time.Time) holdVerdict {
	if h.stopping {
		return holdKeep // already handing off: released once its poll returned
	}
	s, active := w.sessions[id]
	if !active {
		return holdAbort // removed or paused: its running poll is cancelled too
	}
	if !w.matches(s) {
		return holdStop // its selector no longer matches this worker
	}
	if owner := w.owner(id); owner != w.me && owner != "" && !w.redisFull && orphanBack(cl, id, now, w.orphanGrace) {
		if h.members != w.members {
			return holdStop // the membership changed since the loop started: move at once
		}
		until := h.acquired.Add(w.leaseTTL)
		if !now.Before(until) {
			return holdStop
		}
		*settleAt = earliest(*settleAt, until) // held back from a second move within a lease TTL
	}
	if !sameSession(*s, *h.sess) {
		return holdRestart
	}
	return holdKeep
}

// orphanBack reports whether a held session that another worker is
// preferred for may go to it: always, unless it was adopted as an orphan
// less than grace ago (which bounds ping-pong with a broken preferred
// worker).
func orphanBack(cl *claims, id string, now time.Time, grace time.Duration) bool {
	since, ok := cl.orphanSince[id]
	return !ok || now.Sub(since) >= grace
}

// earliest returns the earlier of a and b, a zero time standing for none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// acquiredVerdict is what decideAcquired says of one acquire result.
type acquiredVerdict uint8

const (
	acquiredNothing   acquiredVerdict = iota // nothing to do (held already, lease not Held, a bad key)
	acquiredStart                            // start the poll loop
	acquiredRelease                          // taken, but paused or removed meanwhile: release at once
	acquiredContended                        // another holder, or the loss quarantine: ask again when it ends
	acquiredUnknown                          // the outcome is unknown (Redis error): look again next round
)

// decideAcquired says what to do with one acquire result r: held tells
// whether a loop runs for the session already, active whether its
// definition is still active, leaseHeld whether a lease won is Held.
func decideAcquired(r lease.Result, held, active, leaseHeld bool) acquiredVerdict {
	switch {
	case r.Err != nil:
		return acquiredUnknown
	case r.Lease != nil && (held || !leaseHeld):
		return acquiredNothing
	case r.Lease != nil && !active:
		return acquiredRelease
	case r.Lease != nil:
		return acquiredStart
	case r.Remaining > 0:
		// Another worker's lease (Holder), or the loss quarantine (no
		// Holder, Quarantined): asked for again when it runs out, or when
		// the holder announces a release.
		return acquiredContended
	}
	return acquiredNothing
}

// decideOrphans is the orphan watch: given the sessions seen free since
// (pending) and those free now, it returns those free for grace (to
// adopt) and the sessions to keep watching, with when each was first
// seen free; a session no longer free is forgotten.
func decideOrphans(pending map[string]time.Time, free []string, now time.Time, grace time.Duration) (take []string, next map[string]time.Time) {
	next = make(map[string]time.Time, len(free))
	for _, id := range free {
		first, ok := pending[id]
		switch {
		case !ok:
			next[id] = now
		case now.Sub(first) >= grace:
			take = append(take, id)
		default:
			next[id] = first
		}
	}
	return take, next
}

// exitVerdict is what decideExited says of a poll loop that ended.
type exitVerdict uint8

const (
	exitForget  exitVerdict = iota // its lease was lost: nothing to release
	exitRestart                    // redefined: start again under the same lease
	exitRelease                    // paused or removed: release with no schedule for a successor
	exitHandOff                    // handed off: release, passing the next due time on
)

// decideExited says what follows the end of h's loop: state is its
// lease's state, active whether its session is still active.
func decideExited(h *hold, state lease.State, active bool) exitVerdict {
	switch {
	case state != lease.Held && state != lease.Uncertain:
		return exitForget
	case h.restartAs != nil && !h.stopping && state == lease.Held:
		return exitRestart
	case !active:
		// Its schedule (a backoff, say) must not outlive it.
		return exitRelease
	}
	return exitHandOff
}

func sameSession(a, b session.Session) bool {
	return a.ID == b.ID && a.URL == b.URL && a.Interval == b.Interval &&
		a.Paused == b.Paused && maps.Equal(a.Labels, b.Labels) && a.Selector == b.Selector && a.SameRequest(b) &&
		a.Schedule == b.Schedule && a.TZ == b.TZ && a.Jitter == b.Jitter && a.CatchUp == b.CatchUp && a.CatchUpWindow == b.CatchUpWindow
}
