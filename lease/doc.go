// Package lease holds per-session leases in Redis with fencing tokens.
//
// A lease is the key <prefix>:lease:{<session>} holding an owner value that is
// unique to one acquisition (the holder's id plus 64 random bits). Acquire is
// SET NX PX plus INCR of the session's never-expiring fencing counter, in one
// script; renew (PEXPIRE) and release (DEL) are scripts that act only where
// GET equals the owner value, so a holder can never extend or delete a lease
// that another acquisition holds. Every script takes many sessions per call,
// and the calls of one cycle go out at once, in one pipeline or (renewal of
// many leases) a few pipelines sent concurrently on separate connections,
// whose replies are handled as each arrives: one round trip per Redis shard
// in wall time whatever the number of leases. A release leaves a handoff
// mark (<prefix>:released:{<session>}, the release time, kept one TTL) that
// the successor's acquisition consumes to report the handoff gap
// (Lease.HandoffGap).
//
// # Guarantees
//
//   - Fail closed. The holder keeps a local deadline per lease, measured on
//     the monotonic clock from the instant the acquire or renew request that
//     set the TTL was sent, minus a drift margin (default TTL/100 + 2ms, as
//     Redlock). A lease is Held only while that deadline has not passed. A
//     renewal that errors or times out makes it Uncertain at once; a reply
//     saying the key is gone or owned by another makes it Lost; reaching the
//     deadline makes it Lost. Leaving Held cancels Lease.Context at once.
//   - Errors are never read as ownership: an acquire whose reply is lost is
//     not Held; it is retried later with the same owner value, which the
//     acquire script recognises (idempotent under client retries).
//   - Fencing tokens of a session strictly increase across acquisitions,
//     lease expiry, holder restarts and SCRIPT FLUSH, because the counter is
//     a plain key that never expires and is only incremented.
//
// # Non-guarantees
//
//   - The deadline assumes that the Redis server's clock and the holder's
//     clock run at rates within the drift margin of each other, and that a
//     process pause is noticed (a paused holder is stopped by its deadline,
//     not by Redis; a poll already running when the pause began may still
//     send requests after it: downstream systems must check the fencing
//     token to reject them).
//   - Redis failover with asynchronous replication can lose a lease or a
//     counter increment; a restart of Redis without persistence resets the
//     counters. Tokens are then only as monotonic as the data Redis kept.
package lease
