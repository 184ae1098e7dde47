package poller

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
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
	c.reapLoops(ctx)
	if !c.refresh(ctx, full) {
		return
	}
	now := c.cfg.Clock.Now()
	w := c.world(full)
	c.apply(ctx, w, decide(w, c.claims, c.held, now), now)
	if w.live && w.member {
		c.adoptOrphans(ctx)
	}
	c.checkBehind()
	c.publishStatus()
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
		members: c.view.members.Version, sessions: c.view.sessions, owner: c.ownerOf,
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
		c.stopLoop(c.held[id])
	}
	for _, id := range a.restart {
		// Redefined: restart the loop under the same lease once the current
		// poll has finished.
		h := c.held[id]
		h.restartAs = w.sessions[id]
		c.sched.Stop(h.loop)
	}
	if len(a.acquire) > 0 {
		c.takeLeases(ctx, a.acquire, false)
	}
	if w.share {
		missing := a.missing
		for _, id := range a.acquire {
			if _, ok := c.held[id]; ok {
				missing-- // taken just now
			}
		}
		c.checkShare(missing, now)
	}
}

// reapLoops handles the poll loops that have exited (decideExited): a
// loop restarted for a new session definition starts again under the same
// lease; a stopped loop's lease is released now that its poll has
// returned (and the peers are told); a loop that ended because its lease
// was lost is forgotten.
func (c *Coordinator) reapLoops(ctx context.Context) {
	var release []lease.Handoff
	for _, l := range c.sched.Ended() {
		id := l.sess.ID
		h := c.held[id]
		if h == nil || h.loop != l {
			continue // collected already (stopAll)
		}
		_, active := c.view.sessions[id]
		c.forgetLoop(id, h)
		delete(c.claims.orphanSince, id)
		c.touch(id) // lost ones may be taken again
		if st, ok := c.view.buckets[keyspace.BucketOf(id)]; !ok || !st.assigned {
			// Kept only while polled here (an orphan, or a bucket no
			// longer read): its definition may be stale from now on.
			delete(c.view.sessions, id)
		}
		switch decideExited(h, l.lease.State(), active) {
		case exitForget:
			c.claims.watchOrphans() // lost: others' sessions may be adrift too
		case exitRestart:
			c.startLoopAt(h.restartAs, l.lease, l.polled)
		case exitRelease:
			// Paused or removed: the mark keeps no schedule for a successor.
			release = append(release, lease.Handoff{Lease: l.lease})
		case exitHandOff:
			release = append(release, c.handoff(l))
		}
	}
	if len(release) == 0 {
		return
	}
	if _, err := c.release(context.WithoutCancel(ctx), release, c.cfg.RequestTimeout); err != nil {
		c.cfg.Observer.RedisError("release")
		c.log.Warn("handoff release failed; leases expire by TTL", zap.Error(err))
	}
}

// acquireChunk is the number of leases asked for per request: a large
// start sends many modest requests one after another rather than one huge
// pipeline whose reply could outlast RequestTimeout on a busy Redis.
const acquireChunk = 1000

// acquire takes the leases of ids and starts their poll loops, in chunks of
// acquireChunk; it stops early, asking for a new round, when a peer joins
// or leaves meanwhile. A lease held by another worker is asked for again
// when it would expire (a retry timer), or sooner if its holder announces
// a release.
func (c *Coordinator) takeLeases(ctx context.Context, ids []string, orphan bool) {
	ids = c.onlyMatching(ids)
	var out acquireOutcome
	out.retry = -1
	for start := 0; start < len(ids); start += acquireChunk {
		chunk := ids[start:min(start+acquireChunk, len(ids))]
		if ctx.Err() != nil {
			break
		}
		if start > 0 && c.news.peerNews.Load() {
			// A peer joined or left: the rest of this plan may be stale
			// (and already taken by others). Plan again at once.
			for _, id := range ids[start:] {
				c.touch(id)
			}
			c.news.trigger()
			break
		}
		rctx, cancel := c.requestCtx(ctx)
		results := c.leases.Acquire(rctx, chunk)
		cancel()
		c.confirmDefinitions(ctx, results)
		now := c.cfg.Clock.Now()
		for _, r := range results {
			c.applyResult(r, orphan, now, &out)
		}
	}
	if out.failed {
		c.cfg.Observer.RedisError("acquire")
	}
	if len(out.release) > 0 {
		// Taken, but paused or removed since the plan was made: given
		// back at once, with no schedule to keep (none was polled).
		if _, err := c.release(context.WithoutCancel(ctx), out.release, c.cfg.RequestTimeout); err != nil {
			c.cfg.Observer.RedisError("release")
			c.log.Warn("release of leases not needed failed; they expire by TTL", zap.Error(err))
		}
	}
	if out.retry >= 0 {
		c.claims.scheduleRetry(out.retry + retrySlack)
	}
}

// acquireOutcome sums up the results of one acquire.
type acquireOutcome struct {
	failed  bool            // some outcome is unknown (a Redis error)
	retry   time.Duration   // the earliest contended lease's remaining TTL; -1 if none
	release []lease.Handoff // leases taken for sessions no longer active
}

// confirmDefinitions makes the sessions just acquired (results) start
// from definitions at least as new as the change that let them go: a
// holder releases a session as soon as it learns of its pause or removal,
// and the lease can reach this worker before its view, read earlier in the
// round, has that change. It reads the changes since the view's revision
// (one round trip, a short reply when nothing changed) and, for the
// acquired sessions whose bucket changed, their definitions (redefine).
// When that cannot be read, their definitions are dropped, so that
// acquired releases their leases, and their buckets read again.
func (c *Coordinator) confirmDefinitions(ctx context.Context, results []lease.Result) {
	var got []string
	for _, r := range results {
		if _, running := c.held[r.Session]; r.Lease != nil && !running && r.Lease.State() == lease.Held {
			got = append(got, r.Session)
		}
	}
	if len(got) == 0 || !c.view.synced {
		return
	}
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	changed, _, reset, err := c.store.Changes(rctx, c.view.seenRev)
	recheck := got
	if err == nil && !reset {
		recheck = inChangedBuckets(got, changed)
	}
	if len(recheck) == 0 {
		return
	}
	var sessions []session.Session
	if err == nil {
		sessions, _, err = c.loader.Fetch(rctx, recheck)
	}
	if err != nil {
		c.health.redisFailed("sessions", "session read", err)
		for _, id := range recheck {
			delete(c.view.sessions, id)
			c.touch(id)
			if st, ok := c.view.buckets[keyspace.BucketOf(id)]; ok {
				st.loaded = false
			}
		}
		return
	}
	c.redefine(recheck, sessions)
}

// inChangedBuckets returns the ids (in order) whose bucket is among the
// changed ones.
func inChangedBuckets(ids []string, changed []session.BucketSize) []string {
	buckets := make(map[int]struct{}, len(changed))
	for _, ch := range changed {
		buckets[ch.Bucket] = struct{}{}
	}
	var out []string
	for _, id := range ids {
		if _, ok := buckets[keyspace.BucketOf(id)]; ok {
			out = append(out, id)
		}
	}
	return out
}

// applyResult applies one acquire result, received at now (decideAcquired):
// starts the poll loop of a new lease, or records the contention (or
// quarantine) to try again when it ends.
func (c *Coordinator) applyResult(r lease.Result, orphan bool, now time.Time, out *acquireOutcome) {
	if r.Lease != nil {
		delete(c.claims.contended, r.Session)
	}
	_, held := c.held[r.Session]
	s, active := c.view.sessions[r.Session]
	switch decideAcquired(r, held, active, r.Lease != nil && r.Lease.State() == lease.Held) {
	case acquiredUnknown:
		c.touch(r.Session)
		c.health.redisOK.Store(false)
		out.failed = true
		c.claims.watchOrphans()
	case acquiredRelease:
		out.release = append(out.release, lease.Handoff{Lease: r.Lease})
	case acquiredStart:
		if orphan {
			c.claims.orphanSince[r.Session] = now
		}
		c.startLoop(s, r.Lease)
	case acquiredContended:
		c.claims.contended[r.Session] = contention{holder: r.Holder, until: now.Add(r.Remaining)}
		if out.retry < 0 || r.Remaining < out.retry {
			out.retry = r.Remaining
		}
	}
}

// adoptOrphans takes sessions that have had no lease for OrphanGrace
// although a live worker is preferred for them. Each worker watches the
// sessions of the buckets for which it ranks second, so the watch costs
// one read per session per OrphanGrace/2 across the fleet.
//
// A worker starts watching OrphanGrace after its first round: a session
// must be seen free for OrphanGrace anyway, and in a fleet that starts
// together every session is free at first, so an earlier look would only
// read and remember the whole watch set.
//
// In a steady fleet there is nothing to watch, so the scan runs every
// OrphanGrace/2 only for a while after something changed (membership, the
// sessions, a lost lease, a failed acquire) or while a suspect is pending,
// and otherwise once per orphanFallback × OrphanGrace.
func (c *Coordinator) adoptOrphans(ctx context.Context) {
	now := c.cfg.Clock.Now()
	if !c.claims.orphanScanDue(now, c.view.fleet.Len()) {
		return
	}
	c.claims.lastOrphan = now
	watch := c.watchList()
	if len(watch) == 0 {
		return
	}
	rctx, cancel := c.requestCtx(ctx)
	free, err := c.leases.Unheld(rctx, watch)
	cancel()
	if err != nil {
		c.log.Warn("orphan check failed", zap.Error(err))
		return
	}
	take, pending := decideOrphans(c.claims.pendingOrphans, free, now, c.cfg.OrphanGrace)
	c.claims.pendingOrphans = pending
	if len(take) == 0 {
		return
	}
	rctx, cancel = c.requestCtx(ctx)
	sessions, _, err := c.loader.Fetch(rctx, take)
	cancel()
	if err != nil {
		c.log.Warn("orphan definitions read failed", zap.Error(err))
		return
	}
	take = take[:0]
	for _, s := range sessions {
		if !c.matches(s) {
			c.view.weighing.noteUnmatched(s.ID) // not ours to adopt: stop watching it
			continue
		}
		if !s.Paused {
			c.view.sessions[s.ID] = c.definition(s)
			take = append(take, s.ID)
		}
	}
	if len(take) > 0 {
		c.log.Info("adopting orphans", zap.Int("sessions", len(take)))
		c.takeLeases(ctx, take, true)
	}
}

// watchList returns the sessions of the loaded watched buckets that this
// worker does not poll.
func (c *Coordinator) watchList() []string {
	var watch []string
	for _, st := range c.view.buckets {
		if st.assigned || !st.loaded {
			continue
		}
		for _, id := range st.ids {
			if _, ok := c.held[id]; !ok && keyspace.ValidateID(id) == nil && !c.isUnmatched(id) {
				watch = append(watch, id)
			}
		}
	}
	return watch
}

// checkBehind logs when the worker starts and stops being behind
// (PollStats.Behind), or its reason changes, once each time (the
// scheduler wakes the main loop on a change).
func (c *Coordinator) checkBehind() {
	ps := c.pollStats(false) // every round: without counting the loops
	if was := c.view.behind; ps.Behind == was.Behind && ps.BehindReason == was.BehindReason && ps.BehindHost == was.BehindHost {
		return
	}
	c.view.behind = ps
	logBehind(c.log, ps, c.cfg.MaxPolls)
}

// checkShare makes the worker ready (Ready) once it holds every session
// the plan gives it (missing is none), those other workers still hand over
// included, or once readyBound has passed since its first round as a
// member, so that a rolling update that waits for readiness replaces the
// next worker only after this one took its share. Readiness stays once
// reached.
func (c *Coordinator) checkShare(missing int, now time.Time) {
	if c.view.memberSince.IsZero() {
		c.view.memberSince = now
	}
	if missing == 0 {
		c.health.shareTaken.Store(true)
		return
	}
	if bound := c.readyBound(); now.Sub(c.view.memberSince) >= bound {
		c.log.Warn("ready without its whole share", zap.Int("missing", missing), zap.Duration("after", bound))
		c.health.shareTaken.Store(true)
	}
}

// readyBound is how long a worker may stay unready waiting for its share:
// one lease TTL (a holder that does not hand off loses its lease by then)
// plus two discovery intervals.
func (c *Coordinator) readyBound() time.Duration {
	return c.cfg.LeaseTTL + 2*c.cfg.DiscoveryInterval
}

func (c *Coordinator) publishStatus() {
	malformed := c.malformedCount()
	c.status.mu.Lock()
	c.status.last.Members = c.view.members.Nodes
	c.status.last.Sessions = len(c.view.sessions)
	c.status.last.Malformed = malformed
	c.status.mu.Unlock()
	c.cfg.Observer.Round(len(c.view.members.Nodes), len(c.view.sessions), len(c.held), malformed, c.view.membersChanged)
	c.view.membersChanged = false
}
