// Package poller runs one pollworker worker: a Coordinator that shares the
// sessions stored in Redis (package session) with the other live workers
// and polls those it holds, through a Poller the embedder supplies.
//
// The Coordinator composes the other packages and adds no placement policy
// of its own: nodes for its heartbeat and the live membership, session for
// the session definitions and their change record, assign for where every
// index bucket goes, lease for the leases and their fencing tokens. Each
// round (every DiscoveryInterval, or at once on a Pub/Sub event, a lost
// lease, a competitor's lease running out or a peer's heartbeat expiring)
// it reads what changed, asks assign for the plan, hands off what another
// live worker is preferred for (stop the poll loop, wait for the poll in
// flight, release, announce), acquires what it is preferred for, and adopts
// orphans: sessions left without a lease for OrphanGrace, which the worker
// ranked second for their bucket takes. The polls of the held sessions run
// from one timer heap, on a few goroutines that run polls one after another:
// an idle session has no goroutine.
// ARCHITECTURE.md, at the root of the module, walks through one round and
// names the goroutines.
//
// Run blocks until its context is done, then drains (stops the polls,
// releases the leases, leaves the membership) and returns only after every
// goroutine it started has exited, but for a poll stuck in a Poll that
// ignores its cancelled ctx past DrainTimeout (Coordinator.Run).
//
// # Guarantees
//
//   - Poll runs only while this worker holds the session's lease (state
//     lease.Held) and the lease's local deadline has not passed. Its ctx is
//     cancelled the moment the lease becomes uncertain or lost, so a poll
//     stops at the latest at that deadline, before another worker can take
//     the session over (which needs the lease to expire in Redis).
//   - At most one poll of a session runs at a time in one Coordinator, and
//     a session's lease has one holder at a time (package lease, including
//     its loss quarantine after Redis lost data), so within the lease's
//     assumptions the polls of two workers do not overlap.
//   - A handoff waits for the poll in flight: the poll loop stops, the
//     running poll finishes under the still-renewed lease, and only then is
//     the lease released and the release announced. The successor keeps
//     the session's schedule (lease.Handoff.NextPoll), so a handoff does not
//     poll a session early.
//   - Fail closed: a worker that cannot renew stops polling (its leases turn
//     Uncertain, then Lost), and a worker that is not Ready acquires
//     nothing. Errors are never read as ownership.
//   - Every worker computes placement with package assign from the same
//     inputs (the live members and the bucket sizes), so workers that see
//     the same membership agree on every session's preferred worker.
//   - With Config.Stateful, the session's state (Turn.State, package
//     state) is read after the lease is acquired and before the first poll
//     under it, so it holds every earlier holder's last save (a corrupt
//     record reads as never saved); SessionState.Save is fenced by the poll's
//     lease in Redis, so a holder whose lease has moved on can never
//     overwrite its successor's state. After a crash the successor keeps
//     the schedule the saved record gives (its poll's due time + the
//     interval).
//   - A panic in Poll is recovered and counted; it stops neither the
//     session's loop nor any other session.
//   - Run stops, with an error matching nodes.ErrDuplicateID, when another
//     live process claims this worker's id. A claim of another incarnation
//     found at start that is not renewed (a process killed and restarted
//     under the same id, as a container keeps its hostname) is waited out,
//     at most HeartbeatTTL, and the id taken back.
//
// # Non-guarantees
//
//   - Exactly-once polling. A poll may be skipped around a failure or a
//     handoff (the session is unpolled until a successor takes it: after a
//     crash, once the crashed worker's leases and heartbeat have expired,
//     at most Config.FailoverBound, LeaseTTL + min(LeaseTTL/3, 10s) with
//     only LeaseTTL set, since the other timings follow it; milliseconds
//     after a graceful handoff), and a
//     process paused in the middle of a poll may deliver a request after its
//     lease has moved on: downstream systems must check the fencing token
//     (Turn.Token) to reject such stale requests.
//   - Agreement at every instant. Membership is eventually consistent, so
//     two workers may briefly disagree on who is preferred for a session;
//     the lease decides, and the loser retries when the holder releases or
//     its lease runs out.
//   - Balance beyond the bound of assign: a bucket is never split, and a
//     session held back from a second move within one lease TTL stays where
//     it is until then.
//   - Timeliness of Pub/Sub. Events only speed reactions up; a lost event
//     delays a change until the next periodic round (DiscoveryInterval).
//   - Ordering of callbacks. The Observer's hooks are called from several
//     goroutines (the main loop, the renewal loop, the heartbeat loop,
//     lease deadline timers, the poll runners; each hook says which);
//     calls may overlap and must not block.
package poller
