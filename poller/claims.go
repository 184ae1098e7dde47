package poller

import (
	"time"

	"k8s.io/utils/clock"
)

// claims is the main loop's bookkeeping of sessions it could not simply
// acquire or keep: those another worker held (contended), orphans and the
// watch for them, sessions held back from a handoff, and the timers that
// ask for a round when one of these is due. Owned by the main loop.
type claims struct {
	contended        map[string]contention // sessions another worker held at the last try
	orphanSince      map[string]time.Time  // owned sessions taken as orphans
	pendingOrphans   map[string]time.Time  // watched sessions first seen without a lease
	lastOrphan       time.Time
	watchFrom        time.Time // no orphan watch before then; zero until this worker first held its share (shareHeld)
	orphanWatchUntil time.Time // scan at full rate until then
	settleAt         time.Time // a session held back from a handoff may move then (settled)
	retryTimer       clock.Timer
	retryAt          time.Time // when retryTimer fires
	expiryTimer      clock.Timer

	// What the timers and the watch run on: set by newClaims, never
	// changed (decide reads none of them).
	clock clock.WithTickerAndDelayedExecution
	wake  func()        // asks for a round (news.trigger): the timers call it
	grace time.Duration // Config.OrphanGrace
}

// newClaims returns empty claims whose timers call wake on clk, with
// orphan grace grace.
func newClaims(clk clock.WithTickerAndDelayedExecution, wake func(), grace time.Duration) *claims {
	return &claims{
		orphanSince:    make(map[string]time.Time),
		contended:      make(map[string]contention),
		pendingOrphans: make(map[string]time.Time),
		clock:          clk, wake: wake, grace: grace,
	}
}

// contention is what an acquire learned of a session another worker held.
type contention struct {
	holder string    // its holder id
	until  time.Time // when its lease expires unless renewed (local clock)
}

// stopTimers stops the retry and expiry timers (Run, at its end).
func (cl *claims) stopTimers() {
	if cl.retryTimer != nil {
		cl.retryTimer.Stop()
	}
	if cl.expiryTimer != nil {
		cl.expiryTimer.Stop()
	}
}

// retrySlack is added to a competing lease's remaining TTL before retrying.
const retrySlack = 5 * time.Millisecond

// scheduleRetry asks for a round in d, unless one is due sooner already
// (the round it starts schedules the next retry).
func (cl *claims) scheduleRetry(d time.Duration) {
	now := cl.clock.Now()
	at := now.Add(d)
	if cl.retryTimer != nil && cl.retryAt.After(now) && !at.Before(cl.retryAt) {
		return
	}
	cl.retryAt = at
	if cl.retryTimer == nil {
		cl.retryTimer = cl.clock.AfterFunc(d, cl.wake)
		return
	}
	cl.retryTimer.Reset(d)
}

// scheduleExpiry asks for a round in d (a member's heartbeat expires).
func (cl *claims) scheduleExpiry(d time.Duration) {
	if cl.expiryTimer == nil {
		cl.expiryTimer = cl.clock.AfterFunc(d, cl.wake)
		return
	}
	cl.expiryTimer.Reset(d)
}

// orphanFallback × OrphanGrace is the orphan scan period of a steady fleet.
const orphanFallback = 10

// watchOrphans makes the orphan scan run at full rate for a while: after a
// change, orphans are possible.
func (cl *claims) watchOrphans() {
	cl.orphanWatchUntil = cl.clock.Now().Add(3 * cl.grace)
}

// startRound lets sessions held back from a handoff be looked at again
// once their time is up (settled: the round looks at every session).
func (cl *claims) startRound() (settled bool) {
	now := cl.clock.Now()
	if !cl.settleAt.IsZero() && !now.Before(cl.settleAt) {
		cl.settleAt = time.Time{}
		return true
	}
	return false
}

// shareHeld starts the orphan watch's clock, once: the watch begins
// OrphanGrace after this worker first held its planned share (or stopped
// waiting for it: readiness, reporter.checkShare, bounded by readyBound).
// In a fleet that starts together every session is free until its owner
// has taken it; a watch begun at a fixed time after the first round, in a
// start slower than OrphanGrace (1M sessions over 50 workers on a loaded
// machine), read every watched bucket and lease on top of the start's own
// reads (SMEMBERS twice per bucket, EXISTS once per session), and adopted
// the sessions owners had not reached yet, to hand them back later.
func (cl *claims) shareHeld(now time.Time) {
	if cl.watchFrom.IsZero() {
		cl.watchFrom = now.Add(cl.grace)
	}
}

// watching reports whether the orphan watch has begun (shareHeld, then
// OrphanGrace).
func (cl *claims) watching(now time.Time) bool {
	return !cl.watchFrom.IsZero() && !now.Before(cl.watchFrom)
}

// orphanScanDue reports whether the orphan watch looks now: not before it
// began (watching), at most every OrphanGrace/2, and in a steady fleet (nothing
// changed lately, no suspect pending) only every orphanFallback ×
// OrphanGrace; never with fewer than two workers (workers).
func (cl *claims) orphanScanDue(now time.Time, workers int) bool {
	if !cl.watching(now) || now.Sub(cl.lastOrphan) < cl.grace/2 || workers < 2 {
		return false
	}
	active := now.Before(cl.orphanWatchUntil) || len(cl.pendingOrphans) > 0
	return active || now.Sub(cl.lastOrphan) >= orphanFallback*cl.grace
}
