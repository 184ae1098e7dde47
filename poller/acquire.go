package poller

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/lease"
)

// acquireChunk is the number of leases asked for per request: a large
// start sends many modest requests one after another rather than one huge
// pipeline whose reply could outlast RequestTimeout on a busy Redis.
const acquireChunk = 1000

// take takes the leases of ids and starts their poll loops, in chunks of
// acquireChunk; it stops early, asking for a new round, when a peer joins
// or leaves meanwhile. A lease held by another worker is asked for again
// when it would expire (a retry timer), or sooner if its holder announces
// a release.
func (ho *holdings) take(ctx context.Context, ids []string, orphan bool) {
	ids = ho.view.onlyMatching(ids)
	var out acquireOutcome
	out.retry = -1
	// Read once for the whole take: every chunk reads again what it took.
	all := ho.view.confirmAll.Swap(false)
	for start := 0; start < len(ids); start += acquireChunk {
		chunk := ids[start:min(start+acquireChunk, len(ids))]
		if ctx.Err() != nil {
			break
		}
		if start > 0 && ho.news.peerNews.Load() {
			// A peer joined or left: the rest of this plan may be stale
			// (and already taken by others). Plan again at once.
			for _, id := range ids[start:] {
				ho.view.touch(id)
			}
			ho.news.trigger()
			break
		}
		rctx, cancel := context.WithTimeout(ctx, ho.timeout)
		results := ho.leases.Acquire(rctx, chunk)
		cancel()
		ho.view.confirmDefinitions(ctx, results, all)
		now := ho.clock.Now()
		for _, r := range results {
			ho.applyResult(r, orphan, now, &out)
		}
		out.taken += len(chunk)
	}
	ho.settle(ctx, &out, all && out.taken < len(ids))
}

// settle follows a take's outcome: the loss it revealed, the leases to
// give back, the retry of the contended ones. stoppedShort: the take had
// to read again what it took (view.confirmAll) and did not ask for every
// session.
func (ho *holdings) settle(ctx context.Context, out *acquireOutcome, stoppedShort bool) {
	if out.failed || stoppedShort {
		// An unknown outcome's reply may have been a quarantine's notice;
		// and a take that stopped short leaves sessions taken later to
		// be read again too.
		ho.view.confirmAll.Store(true)
	}
	if out.failed {
		ho.obs.RedisError("acquire")
	}
	switch {
	case out.quarantined:
		ho.view.dataLost()
	case out.took:
		ho.view.lossReread = false // the quarantine is over
	}
	if len(out.release) > 0 {
		// Taken, but paused or removed since the plan was made: given
		// back at once, with no schedule to keep (none was polled).
		if _, err := ho.release(context.WithoutCancel(ctx), out.release, ho.timeout); err != nil {
			ho.obs.RedisError("release")
			ho.log.Warn("release of leases not needed failed; they expire by TTL", zap.Error(err))
		}
	}
	if out.retry >= 0 {
		ho.claims.scheduleRetry(out.retry + retrySlack)
	}
}

// acquireOutcome sums up the results of one acquire.
type acquireOutcome struct {
	failed  bool            // some outcome is unknown (a Redis error)
	retry   time.Duration   // the earliest contended lease's remaining TTL; -1 if none
	release []lease.Handoff // leases taken for sessions no longer active
	// quarantined: some lease was refused for the loss quarantine (Redis
	// lost data); took: some lease was taken.
	quarantined, took bool
	taken             int // sessions asked for so far (a take may stop short)
}

// applyResult applies one acquire result, received at now (decideAcquired):
// starts the poll loop of a new lease, or records the contention (or
// quarantine) to try again when it ends.
func (ho *holdings) applyResult(r lease.Result, orphan bool, now time.Time, out *acquireOutcome) {
	if r.Lease != nil {
		delete(ho.claims.contended, r.Session)
		out.took = true
	}
	out.quarantined = out.quarantined || r.Quarantined
	_, held := ho.held[r.Session]
	s, active := ho.view.sessions[r.Session]
	switch decideAcquired(r, held, active, r.Lease != nil && r.Lease.State() == lease.Held) {
	case acquiredUnknown:
		ho.view.touch(r.Session)
		ho.health.redisOK.Store(false)
		out.failed = true
		ho.claims.watchOrphans()
	case acquiredRelease:
		out.release = append(out.release, lease.Handoff{Lease: r.Lease})
	case acquiredStart:
		if orphan {
			ho.claims.orphanSince[r.Session] = now
		}
		ho.start(s, r.Lease)
	case acquiredContended:
		ho.claims.contended[r.Session] = contention{holder: r.Holder, until: now.Add(r.Remaining)}
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
func (ho *holdings) adoptOrphans(ctx context.Context) {
	now := ho.clock.Now()
	if !ho.claims.orphanScanDue(now, ho.view.fleet.Len()) {
		return
	}
	ho.claims.lastOrphan = now
	watch := ho.view.watchList()
	if len(watch) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, ho.timeout)
	free, err := ho.leases.Unheld(rctx, watch)
	cancel()
	if err != nil {
		ho.log.Warn("orphan check failed", zap.Error(err))
		return
	}
	take, pending := decideOrphans(ho.claims.pendingOrphans, free, now, ho.claims.grace)
	ho.claims.pendingOrphans = pending
	if len(take) == 0 {
		return
	}
	rctx, cancel = context.WithTimeout(ctx, ho.timeout)
	sessions, _, err := ho.view.loader.Fetch(rctx, take)
	cancel()
	if err != nil {
		ho.log.Warn("orphan definitions read failed", zap.Error(err))
		return
	}
	take = take[:0]
	for _, s := range sessions {
		if !ho.view.matches(s) {
			ho.view.weighing.noteUnmatched(s.ID) // not ours to adopt: stop watching it
			continue
		}
		if !s.Paused {
			ho.view.sessions[s.ID] = ho.view.definition(s)
			take = append(take, s.ID)
		}
	}
	if len(take) > 0 {
		ho.log.Info("adopting orphans", zap.Int("sessions", len(take)))
		ho.take(ctx, take, true)
	}
}
