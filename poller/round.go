package poller

import (
	"context"
	"time"
)

// round reads, decides and acts (decide.go): it collects the poll loops
// that ended, refreshes the world from Redis (refresh), decides what to
// change (decide: hand off what another live worker should hold, acquire
// what this worker should hold) and applies it, then picks up orphans.
//
// A full round looks at every session; it runs every DiscoveryInterval and
// whenever the assignment changed. Other rounds (woken by events, loads,
// exits and retries) look only at the sessions touched since the last
// round, so that their cost follows what changed, not what is owned.
func (c *Coordinator) round(ctx context.Context, full bool) {
	if c.claims.startRound() {
		c.view.sweepAll = true
	}
	c.holdings.reap(ctx)
	gate := c.holdings.sched.GateEpoch() // read before the sessions: a stall after it waits for the next round
	if !c.view.refresh(ctx, full) {
		return
	}
	now := c.cfg.Clock.Now()
	w := c.world(full)
	c.apply(ctx, w, decide(w, c.claims, c.holdings.held, now), now)
	c.holdings.sched.Resume(gate)
	if w.live && w.member {
		c.holdings.adoptOrphans(ctx)
	}
	c.report.checkBehind(now)
	c.report.publish(c.view, len(c.holdings.held))
}

// world is what the round decides on: the view refreshed, the touched
// sessions and the peers' releases since the last round (both consumed).
func (c *Coordinator) world(full bool) *world {
	released := c.news.takeReleased()
	// Only a live worker that its peers count as live takes sessions.
	live, member := c.health.isLive(), c.view.members.Contains(c.cfg.ID)
	full = full || c.view.sweepAll || (live && member) != c.view.wasMember
	c.view.sweepAll, c.view.wasMember = false, live && member
	touched := c.view.touched
	c.view.touched = make(map[string]struct{})
	return &world{
		me: c.cfg.ID, labels: c.cfg.Labels, live: live, member: member,
		cordoned: c.view.members.IsCordoned(c.cfg.ID), redisFull: c.health.redisFull.Load(),
		members: c.view.members.Version, sessions: c.view.sessions, owner: c.view.ownerOf,
		full: full, touched: touched, released: released,
		leaseTTL: c.cfg.LeaseTTL, orphanGrace: c.cfg.OrphanGrace,
		share: live && member && !c.health.shareTaken.Load(),
	}
}

// apply does what decide said: forgets the contentions that ended, sets the
// retry and settle timers, stops and restarts loops, acquires, and notes
// readiness.
func (c *Coordinator) apply(ctx context.Context, w *world, a actions, now time.Time) {
	for _, id := range a.uncontend {
		delete(c.claims.contended, id)
	}
	if !a.retryAt.IsZero() {
		c.claims.scheduleRetry(a.retryAt.Sub(now) + retrySlack)
	}
	if !a.settleAt.IsZero() && (c.claims.settleAt.IsZero() || a.settleAt.Before(c.claims.settleAt)) {
		c.claims.settleAt = a.settleAt
		c.claims.scheduleRetry(a.settleAt.Sub(now))
	}
	for _, id := range a.stop {
		c.holdings.stop(c.holdings.held[id])
	}
	for _, id := range a.abort {
		c.holdings.sched.Abort(c.holdings.held[id].loop)
	}
	for _, id := range a.restart {
		c.holdings.restart(id, w.sessions[id])
	}
	if len(a.acquire) > 0 {
		c.holdings.take(ctx, a.acquire, false)
	}
	if w.share {
		missing := a.missing
		for _, id := range a.acquire {
			if _, ok := c.holdings.held[id]; ok {
				missing-- // taken just now
			}
		}
		c.report.checkShare(missing, now)
	}
}
