// Package election elects one leader per role among any number of
// candidates, on the lease machinery of package lease.
//
// A role is the lease of the session "election:<role>": its key is
// <prefix>:lease:{election:<role>} and its fencing record
// <prefix>:fencing:{election:<role>}. The candidate that acquires the lease
// leads until it loses the lease, resigns or stops; every term gets a
// fencing token strictly greater than that of every earlier term. Candidates
// also record themselves (id and priority, with a TTL) next to the lease, so
// that a leader can hand over to a named or higher-priority live candidate.
//
//	<prefix>:candidates:{election:<role>}     hash id -> priority (pruned lazily)
//	<prefix>:candidate:{election:<role>}:<id> priority, PX TTL: the candidate is live while it exists
//	<prefix>:successor:{election:<role>}      preferred next leader "<id>#<random>", PX TTL
//
// All keys of a role share the hash tag {election:<role>}, so a role lives in
// one Redis Cluster slot; package keyspace builds them all, and the Lua
// script lives in scripts/lua. A candidate is live while it runs and its
// HealthCheck passes; a leader that resigns does not campaign again for two
// RetryIntervals, and while a named successor is live the other candidates
// wait two RetryIntervals before campaigning, so that the successor (which
// campaigns every RetryInterval) wins.
//
// # Guarantees
//
//   - At most one candidate is leader at a time, as far as the lease
//     guarantees it: IsLeader is true only while the lease is Held and its
//     local deadline (measured on the monotonic clock from the instant the
//     acquire or renew request was sent, minus a drift margin) has not passed.
//   - Fail closed: a renewal that errors, times out or finds the lease gone
//     ends the term at once. The context given to OnElected is cancelled the
//     moment the term ends, before OnDemoted is called and before the lease is
//     released in Redis; the lease is released only after OnElected returned.
//   - Fencing tokens strictly increase from term to term (see package lease).
//   - Run returns only after every goroutine it started, OnElected included,
//     has returned. On shutdown the lease is released with a fresh context
//     bounded by Config.ReleaseTimeout, never with the cancelled one.
//   - Priority never preempts: a higher-priority live candidate takes over at
//     the leader's next renewal, when the leader hands over to it.
//
// # Non-guarantees
//
//   - Leadership is not mutual exclusion of side effects. A leader paused
//     (GC, SIGSTOP, VM pause) in the middle of a request may deliver it after
//     its term ended. Downstream systems must check the fencing token
//     (reject any token lower than the highest seen) to be safe.
//   - Redis failover with asynchronous replication may lose the lease key or a
//     fencing increment, and a Redis restart without persistence resets the
//     counter: tokens may then repeat, and two leaders may coexist until the
//     old one's next renewal, or, when a partition isolates the old master
//     with its leader, for as long as the partition lasts (bounded by
//     min-replicas-to-write on the master). Use AOF persistence; RELIABILITY.md
//     ("Sentinel failover and WAIT") has the details and what WAIT costs.
//   - Handover (Resign, TransferTo, priority) is best effort: the preferred
//     successor usually wins within one RetryInterval, but a candidate that
//     read the successor key just before it was written, or a successor that
//     is slower than two RetryIntervals to campaign, may lose to another;
//     the lease still guarantees a single leader. A Resign from the goroutine
//     running OnElected deadlocks until its ctx is done (see Resign).
//   - Deadlines assume the candidates' and Redis's clocks run at rates within
//     the drift margin of each other.
package election
