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
	watchFrom        time.Time // no orphan watch before then (set at the first round)
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

// startRound sets the times a round starts from: the orphan watch begins
// OrphanGrace after the first round, and sessions held back from a handoff
// are looked at again once their time is up (settled: the round looks at
// every session).
func (cl *claims) startRound() (settled bool) {
	now := cl.clock.Now()
	if cl.watchFrom.IsZero() {
		cl.watchFrom = now.Add(cl.grace)
	}
	if !cl.settleAt.IsZero() && !now.Before(cl.settleAt) {
		cl.settleAt = time.Time{}
		return true
	}
	return false
}

// orphanScanDue reports whether the orphan watch looks now: not before
// watchFrom, at most every OrphanGrace/2, and in a steady fleet (nothing
// changed lately, no suspect pending) only every orphanFallback ×
// OrphanGrace; never with fewer than two workers (workers).
func (cl *claims) orphanScanDue(now time.Time, workers int) bool {
	if now.Before(cl.watchFrom) || now.Sub(cl.lastOrphan) < cl.grace/2 || workers < 2 {
		return false
	}
	active := now.Before(cl.orphanWatchUntil) || len(cl.pendingOrphans) > 0
	return active || now.Sub(cl.lastOrphan) >= orphanFallback*cl.grace
}
