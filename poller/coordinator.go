package poller

import (
	"context"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// Coordinator runs one worker: heartbeat, membership, session list,
// ownership by rendezvous hashing, leases, and the polls of the owned
// sessions (one timer for all of them; a goroutine only while a poll runs).
type Coordinator struct {
	cfg      Config
	log      *zap.Logger
	registry *nodes.Registry
	store    *session.Store
	loader   *session.Loader
	leases   *lease.Manager

	run runOnce // Run's guard and its stop

	news   *news      // what other goroutines tell the main loop
	health *health    // what the main loop and the background loops tell readers
	beat   *heartbeat // keeps this worker a member (its own goroutine)

	bad badData // bad records reported once each (baddata.go)

	status published // the snapshot the main loop publishes at the end of a round

	// Owned by the main loop (mainLoop and what it calls; drain after it).
	view   view             // what the worker knows of the fleet and the sessions
	claims *claims          // its bookkeeping of contended and orphaned sessions, and its timers
	held   map[string]*hold // the sessions it holds, by id: their poll loops and what the round decided of them
	sched  *scheduler       // runs the poll loops of the sessions it holds
}

// runOnce guards Run (it runs once) and holds its stop.
type runOnce struct {
	started atomic.Bool
	stop    context.CancelCauseFunc // ends Run's main loop with a cause (set by Run)
}

// published is the Status a round publishes, under its lock.
type published struct {
	mu   sync.Mutex
	last Status
}

// Status is a snapshot of what the worker sees and holds.
type Status struct {
	// ID is the worker id.
	ID string
	// Ready is Ready() at the time of the snapshot.
	Ready bool
	// Members are the live workers seen in the last round.
	Members []string
	// Sessions is the number of active (not paused) sessions assigned to
	// this worker, or polled by it as orphans.
	Sessions int
	// Owned are the sessions whose lease this worker holds, sorted.
	Owned []string
	// Polls, PollErrors and PollPanics count polls since start.
	Polls, PollErrors, PollPanics int64
	// PollsRunning and PollsWaiting are the polls running now and those
	// due but waiting for a slot (Config.MaxPolls).
	PollsRunning, PollsWaiting int
	// PollsDeferred counts the polls that waited for a slot since start,
	// PollsLate those that started later than a tenth of their interval
	// after they were due: a worker that cannot keep up with its share.
	PollsDeferred, PollsLate int64
	// Backoff is the number of sessions whose last poll failed and that
	// are polled less often for it (Config.MaxErrorBackoff).
	Backoff int
	// Behind is PollStats.Behind: the worker cannot keep up with its share.
	Behind bool
	// Malformed is the number of malformed session entries in the buckets
	// assigned to this worker.
	Malformed int
	// EvictionRisk is set when Redis runs a maxmemory-policy other than
	// noeviction (leases and counters may be evicted).
	EvictionRisk bool
}

// ID is this worker's id.
func (c *Coordinator) ID() string { return c.cfg.ID }

// Ready reports whether the worker holds a fresh heartbeat, reached Redis
// on its last attempt, and has held its planned share of the sessions once
// since it started (or waited readyBound, LeaseTTL + 2 × DiscoveryInterval,
// for it): what a rolling update should wait for before it replaces the
// next worker. A worker without a fresh heartbeat or Redis, or while
// Redis is over maxmemory, acquires nothing.
//
// Ready does not turn false when the worker is behind (PollStats.Behind):
// an unready worker keeps its sessions (the plan follows heartbeats, not
// readiness) and gets no traffic to lose, so unreadiness would relieve
// nothing; it would only stall a rollout, including the one that gives
// the fleet more room, and drop the worker from scrapes that skip unready
// targets, just when its metrics matter. Behind is reported beside it;
// an embedder that wants both can use Ready() && !PollStats().Behind.
func (c *Coordinator) Ready() bool {
	return c.health.isLive() && c.health.shareTaken.Load()
}

// Status returns a snapshot for health pages and tests.
func (c *Coordinator) Status() Status {
	c.status.mu.Lock()
	s := c.status.last
	c.status.mu.Unlock()
	s.Ready = c.Ready()
	s.Owned = nil
	for _, l := range c.leases.Held() {
		if l.State() == lease.Held {
			s.Owned = append(s.Owned, l.Session())
		}
	}
	s.Polls, s.PollErrors, s.PollPanics = c.health.polls.Load(), c.health.pollErrors.Load(), c.health.pollPanics.Load()
	ps := c.PollStats()
	s.PollsRunning, s.PollsWaiting, s.PollsDeferred, s.PollsLate, s.Backoff = ps.Running, ps.Waiting, ps.Deferred, ps.Late, ps.Backoff
	s.Behind = ps.Behind
	s.EvictionRisk = c.health.evictionWarning.Load()
	return s
}

// PollStats returns the scheduler's figures now. Backoff and LeasesHeld
// are counted from the poll loops (O(sessions held)): read them at scrape
// or status time, not in a hot loop.
func (c *Coordinator) PollStats() PollStats { return c.pollStats(true) }

// pollStats is PollStats; without countLoops, Backoff and LeasesHeld are
// left at 0 (the main loop's checkBehind needs neither).
func (c *Coordinator) pollStats(countLoops bool) PollStats {
	return pollStatsOf(c.sched.Stats(countLoops), c.registry.Info().PlanWeight(), countLoops)
}

// Leases is the lease manager, for embedders that want to inspect leases.
func (c *Coordinator) Leases() *lease.Manager { return c.leases }

// Unplaceable is the number of active sessions whose selector no live,
// placeable worker's labels match, as of this worker's last plan: they
// are polled by nobody until such a worker joins. Every worker computes
// the same fleet-wide figure.
func (c *Coordinator) Unplaceable() int { return int(c.view.weighing.unplaceable.Load()) }

func (c *Coordinator) requestCtx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, c.cfg.RequestTimeout)
}

// touch marks a session for the next round to look at.
func (c *Coordinator) touch(id string) { c.view.touched[id] = struct{}{} }

// matches reports whether this worker may poll s: its labels match the
// session's selector.
func (c *Coordinator) matches(s session.Session) bool {
	return fleet.SelectorOf(s).Matches(c.cfg.Labels)
}

// onlyMatching returns the ids whose known definition this worker
// matches (defence in depth: the plan never gives a worker a session it
// does not match).
func (c *Coordinator) onlyMatching(ids []string) []string {
	out := ids[:0:0]
	for _, id := range ids {
		if s, ok := c.view.sessions[id]; ok && !c.matches(*s) {
			c.log.Warn("not acquiring a session whose selector this worker does not match", zap.String("session", id), zap.String("selector", s.Selector))
			continue
		}
		out = append(out, id)
	}
	return out
}

// isUnmatched reports whether id was found, in a watched bucket, to have
// a selector this worker does not match.
func (c *Coordinator) isUnmatched(id string) bool {
	_, ok := c.view.weighing.unmatched[id]
	return ok
}

// ownerOf returns the preferred live worker of a session, "" with no live
// worker (or, for a session with a selector, none that matches it or when
// this worker does not match it: it plans only the selectors it matches).
func (c *Coordinator) ownerOf(id string) string {
	sel := fleet.Selector{}
	if s, ok := c.view.sessions[id]; ok && s.Selector != "" {
		sel = fleet.SelectorOf(*s)
	}
	p, ok := c.view.weighing.placement.Planned(sel)
	if !ok || p == nil {
		return ""
	}
	return p.OwnerOf(id)
}

// definition returns s to keep in view.sessions: the definition its
// worker polls with when that is the same, so that the two share one copy,
// else a new one.
func (c *Coordinator) definition(s session.Session) *session.Session {
	if h := c.held[s.ID]; h != nil && sameSession(s, *h.sess) {
		return h.sess
	}
	return &s
}

// malformedCount counts the malformed entries of the assigned buckets.
func (c *Coordinator) malformedCount() int {
	n := 0
	for _, st := range c.view.buckets {
		if st.assigned {
			n += st.malformed
		}
	}
	return n
}
