// Package lease holds per-session leases in Redis with fencing tokens.
//
// A lease is the key <prefix>:lease:{<session>} holding an owner value that is
// unique to one acquisition of the session (the holder's id, its process
// incarnation, the time and 64 random bits). The sessions taken in one
// Acquire share one value, which the scripts take once per call (and the
// renewals once per run of leases sharing it): one argument per session
// cost Redis more CPU per lease. Acquire is SET NX PX plus the minting of a fencing token
// above the slot's high-water mark (<prefix>:epoch:{tag}:tokens) and the
// session's fencing record (<prefix>:fencing:{<session>}, a hash that
// never expires, created by the session's first release), in one script:
// one command per session (SET NX PX) when EXISTS finds no record among
// the call's sessions, as at a cold start; otherwise two (HMGET of the
// record, SET NX PX), a third (HSET of the token) where the record exists;
// the loss marker and the high-water mark are read once per call. Renew
// (PEXPIRE) and release (DEL) are scripts that act only where
// GET equals the owner value, so a holder can never extend or delete a lease
// that another acquisition holds. Every script takes many sessions per call,
// and the calls of one cycle go out at once, in one pipeline or (renewal of
// many leases) a few pipelines sent concurrently on separate connections,
// whose replies are handled as each arrives: one round trip per Redis shard
// in wall time whatever the number of leases. A release leaves a handoff
// mark in the record (field handoff: the released lease's token, the
// release time and when the next poll is due, counting one TTL past that)
// that the successor's acquisition reads to report the handoff gap
// (Lease.HandoffGap) and keep the session's schedule (Lease.NextPoll); the
// mark counts only while its token is the record's, so the new token
// consumes it. docs/key-layout.md, "The fencing record", gives the layout
// and how a keyspace of the layout before it (a fencing counter and a
// handoff mark key per session) is upgraded in place.
//
// # Guarantees
//
//   - Fail closed. The holder keeps a local deadline per lease, measured on
//     the monotonic clock from the instant the acquire or renew request that
//     set the TTL was sent, minus a drift margin (default TTL/100 + 2ms, as
//     Redlock). A lease is Held only while that deadline has not passed. A
//     renewal that errors or times out makes it Uncertain at once, and so
//     are the leases RenewAll skipped in that cycle as younger than
//     Config.MinRenewAge; a reply
//     saying the key is gone or owned by another makes it Lost; reaching the
//     deadline makes it Lost. Leaving Held cancels Lease.Context and
//     runs the functions registered with Lease.AfterTerm at once.
//   - Errors are never read as ownership: an acquire whose reply is lost is
//     not Held; it is retried later with the same owner value, which the
//     acquire script recognises (idempotent under client retries).
//   - Fencing tokens of a session strictly increase, whatever Redis loses.
//     A token is max(last + 1, high + 1, the Redis server's clock in
//     microseconds since the epoch), last being the record's token (or,
//     while it has none, the fencing counter of the layout before it) and
//     high the slot's high-water mark, the greatest token minted in the
//     slot; the mark is set to it, and so is the record where the session
//     has one. Across acquisitions, expiry, holder restarts and SCRIPT
//     FLUSH the mark ensures it (and the record, once there is one); when
//     both are lost (a restart without persistence, FLUSHALL, a failover
//     to a replica that missed them, eviction) the clock puts the next
//     token above every earlier one: a call mints at most one token per
//     microsecond it runs, so its tokens are at or below the server clock
//     when it returns. Assumption: the clock of
//     the server that mints a token is ahead of the clock of the server
//     that minted the previous token of that session at that time — true
//     for one server whose clock is not stepped back, and across a failover
//     as long as the servers' clocks differ by less than the time between
//     the two acquisitions (NTP keeps them within milliseconds; a failover
//     takes seconds). A clock stepped back by more than the time since a
//     session's last acquisition, together with the loss of its record and
//     of the slot's high-water mark,
//     can repeat a token. Tokens minted by a plain counter (pollworker
//     before this scheme) are far below the clock, so an upgrade in place
//     keeps them increasing. Tokens are int64, sent in decimal; the script
//     computes them in Lua's doubles, exact up to 2^53 microseconds (the
//     year 2255): a token at or above 2^53-1, or not a decimal integer,
//     is refused (Result.Bad), never rounded into a shared or backward
//     token, and none at or above it is minted. So is a token more than
//     a year ahead of the server clock, which acquire.lua never mints (a
//     foreign write): in the slot's high-water mark it would run every
//     token of the slot up to 2^53-1 within a few acquisitions; the mark
//     is read as unusable before any token is minted from it.
//   - A bad key affects its own session only. A lease key or fencing
//     record of the wrong type (or an unusable token, in the record or in
//     an old fencing counter) is
//     reported per session (Result.Bad, Holding.Bad, Manager.BadKeys,
//     logged once); the rest of its batch is acquired as usual, nothing of
//     the bad session is written, and no such key is ever deleted or
//     overwritten. A loss marker of the wrong type counts as a lost one:
//     it is logged at error level and overwritten with a fresh quarantine
//     (it is the package's own key; the repair only delays).
//   - No two holders after a data loss (the loss quarantine). Each hash
//     slot has a loss marker (<prefix>:epoch:{tag}, one per slot so that
//     Redis Cluster's acquire script can read it; slot 0's outside
//     Cluster) holding the run id of the server that wrote it. A marker
//     that is missing, or that another server wrote (a restart, even with
//     persistence, whose last second may be lost; a failover to a replica),
//     means the data may be incomplete: the acquire script writes it anew
//     and takes no free lease of that slot for Config.LossQuarantine
//     (default TTL), so every lease granted before the loss has ended at
//     its holder (its renewal finds the key gone, or its deadline passes)
//     before a successor starts. Leases that survived are renewed as usual.
//     A holder whose renewal or release finds its lease gone looks at the
//     marker too (acquire.lua for no session), so that a loss that took
//     the sessions as well starts its quarantine when it is first seen,
//     not when the sessions are written again.
//     From inside Redis a keyspace never used and one that lost its data
//     look the same, so a brand-new deployment also waits once; set
//     LossQuarantine negative where that cannot be tolerated. The run id
//     comes from INFO server; where INFO is refused (an ACL without +info),
//     restarts and failovers go unseen and only a lost marker counts.
//   - A Redis Cluster slot migration (resharding) is not a loss, although
//     it moves the marker to a master of another run id: the marker counts
//     as moved, and is rewritten with the new master's run id and the same
//     quarantine end, when its writer is a master now of the same run,
//     never promoted from replica (asked just before, by INFO on every
//     master: it held the slot without a loss until it left), and the new
//     master was never promoted from replica and started before the
//     marker's confirmation time (<marker>:at, a time on the old master's
//     clock when the slot was still there, so it has not restarted since
//     the slot arrived; 2 s of margin for clock skew and the uptime's whole
//     seconds). While a master does not answer that INFO, nothing is
//     written and the sessions are not taken (Result.Err): the caller asks
//     again later. A failover (a promoted master), a restart, and a marker
//     written before this scheme (no confirmation time) all count as a
//     loss, as before; so does a move of
//     a slot to a master that was itself promoted once, or out of a master
//     that no longer serves any slot (a safe false alarm). Assumption:
//     server clocks within 1 s of each other.
//
// # Non-guarantees
//
//   - The deadline assumes that the Redis server's clock and the holder's
//     clock run at rates within the drift margin of each other, and that a
//     process pause is noticed (a paused holder is stopped by its deadline,
//     not by Redis; a poll already running when the pause began may still
//     send requests after it: downstream systems must check the fencing
//     token to reject them).
//   - A partition that leaves an old master accepting writes after a
//     replica was promoted (split brain) can keep a holder renewing there:
//     bound it with min-replicas-to-write on the master.
package lease
