// Package assign is the placement policy of pollworker, and its only home:
// given the live workers (with weights) and the load of each index bucket,
// it says which worker should own each bucket, and which worker watches a
// bucket for orphans. Package fleet applies it to the live workers
// (weights, labels and selectors) for the coordinator, the demo and the
// status commands; the benchmarks call it directly; nothing else computes
// placement.
//
// It is pure: no Redis, no clock, no goroutines. A Fleet is built once per
// membership (it ranks every bucket's candidates); a Plan is built from a
// Fleet and the bucket sizes whenever those change. Both are immutable.
//
// # The policy
//
// Each session falls in one of keyspace.SessionBuckets buckets
// (keyspace.BucketOf). Buckets, not sessions, are placed by weighted
// rendezvous hashing of BucketKey(b) over the worker ids (package hrw).
// On top of that the Plan bounds each worker's load: no worker gets more
// than ceil(Q × share × (1+slack)), where share is its weight over the
// total weight and Q is the total load rounded down to a grid of relative
// step at most slack/5 (see Capacity).
//
// A load is any non-negative integer per bucket; the planner does not
// care what it counts. The workers give it the poll rate of each bucket's
// sessions in polls per day (session.PollsPerDay, kept by the session
// writers), so that a session polled every second weighs 3600 times one
// polled hourly; for an index written before loads were kept, the number
// of sessions. Weights are the workers' declared capacities (--weight,
// carried in their heartbeats).
//
// The bound is enforced by lowering the rendezvous weight of an overloaded
// worker just enough that its buckets closest to another worker's score
// move to that worker (the runner-up of each bucket), one overloaded worker
// at a time, until no worker is over its cap. This moves the fewest
// buckets the bound needs, and only off overloaded workers.
//
// # Guarantees
//
//   - Every bucket has exactly one owner among the members; the result
//     depends only on the members, their weights, the sizes and the slack
//     (not on the order of anything, not on history).
//   - A leave moves only the buckets of the worker that left, and a join
//     moves buckets only to the newcomer, unless the bound binds; when it
//     binds, the buckets that move in addition are the ones the bound needs.
//   - Adding or removing a session (or changing its interval) changes
//     nothing at all unless it pushes a worker over its cap, or moves the
//     total across a grid step: the cap is piecewise constant in the total
//     load, so that sessions added one by one do not shake the placement
//     at each addition.
//
// # Non-guarantees
//
//   - Balance is bounded only where the buckets allow it: a bucket is never
//     split, so one bucket larger than a cap overloads its worker.
//   - Floating-point scores: workers on different CPU architectures could in
//     principle disagree on a tie in the last bit; the leases keep that
//     safe (one holder), it would only cost a contended acquire.
package assign
