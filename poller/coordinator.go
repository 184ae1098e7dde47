package poller

import (
	"context"
	"sync/atomic"

	"go.uber.org/zap"
)

// Coordinator runs one worker: heartbeat, membership, session list,
// ownership by rendezvous hashing, leases, and the polls of the owned
// sessions (one timer for all of them; a goroutine only while a poll runs).
//
// It is the thin owner of its parts (ARCHITECTURE.md, "The Coordinator
// and its parts"): it wires them (New), runs the main loop and each round
// (read: view; decide: decide; act: holdings, claims, reporter) and the
// drain; none of the parts refers to it.
type Coordinator struct {
	cfg Config
	log *zap.Logger

	run runOnce // Run's guard and its stop

	news   *news      // what other goroutines tell the main loop
	health *health    // what the main loop and the background loops tell readers
	beat   *heartbeat // keeps this worker a member (its own goroutine)

	report *reporter // the Status, readiness and the Round it reports
	renew  *renewer  // renews the held leases (its own goroutine)

	// Owned by the main loop (mainLoop and what it calls; drain after it).
	view     *view     // what the worker knows of the fleet and the sessions, and its reading
	claims   *claims   // its bookkeeping of contended and orphaned sessions, and its timers
	holdings *holdings // the sessions it holds: their leases and poll loops
}

// runOnce guards Run (it runs once) and holds its stop.
type runOnce struct {
	started atomic.Bool
	stop    context.CancelCauseFunc // ends Run's main loop with a cause (set by Run)
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
	return c.report.ready()
}

// NotReady says why Ready is false ("Redis is over maxmemory: …", "no
// heartbeat written yet", …), "" when it is true.
func (c *Coordinator) NotReady() string { return c.report.notReady() }

// Status returns a snapshot for health pages and tests.
func (c *Coordinator) Status() Status { return c.report.snapshot(c.holdings.leases) }

// PollStats returns the scheduler's figures now. Backoff and LeasesHeld
// are counted from the poll loops (O(sessions held)): read them at scrape
// or status time, not in a hot loop.
func (c *Coordinator) PollStats() PollStats { return c.report.pollStats(true) }

// Unplaceable is the number of active sessions whose selector no live,
// placeable worker's labels match, as of this worker's last plan: they
// are polled by nobody until such a worker joins. Every worker computes
// the same fleet-wide figure.
func (c *Coordinator) Unplaceable() int { return int(c.view.weighing.unplaceable.Load()) }
