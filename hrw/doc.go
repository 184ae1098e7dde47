// Package hrw decides which worker owns a session by rendezvous
// (highest-random-weight) hashing. It is pure math: no I/O, no clock, no
// goroutines.
//
// A Table is an immutable value built from the current membership with New
// or NewIDs; when membership changes, build a new Table. A Table is safe for
// concurrent use, and its methods accept a nil or zero Table as empty.
//
// # The function
//
// All arithmetic is on unsigned 64-bit integers, wrapping on overflow, so
// another language can reproduce it exactly:
//
//	fnv1a(b)  = h := 14695981039346656037
//	            for each byte c of b: h ^= c; h *= 1099511628211
//	fmix64(x) = x ^= x>>33; x *= 0xff51afd7ed558ccd
//	            x ^= x>>33; x *= 0xc4ceb93e185ec53
//	            x ^= x>>33
//	keyHash   = fnv1a(key)               (HashKey; no finalizer)
//	nodeHash  = fmix64(fnv1a(nodeID))
//	score     = fmix64(keyHash ^ nodeHash)
//
// Keys and ids are hashed as their raw bytes (Go strings: usually UTF-8).
// The node with the highest score owns the key; on equal scores the node
// with the smaller id (byte-wise comparison) wins.
//
// When the nodes' weights are not all equal, the Table compares float64
// weighted scores instead (logarithmic weighted rendezvous, so that a node
// owns a share of keys proportional to its weight):
//
//	u        = (float64(score>>12) + 0.5) / 2^52      in (0, 1), exact
//	weighted = -weight / ln(u)                        > 0
//
// again highest wins and ties go to the smaller id. u uses the top 52 bits
// of the score so that u is exactly representable as a float64 and never
// reaches 0 or 1. When all weights are equal (the usual case) the integer
// score is used, whatever the common weight is.
//
// # Guarantees
//
//   - The owner depends only on the key and the set of (id, weight) pairs:
//     not on the order in which nodes were given, the process or the
//     platform. Unweighted results are bit-exact everywhere.
//   - Minimal disruption: adding a node moves only keys that the new node
//     now owns; removing a node moves only the keys it owned; changing one
//     node's weight moves keys only to or from that node.
//   - Balance is statistical: each of n equally weighted nodes owns about
//     1/n of any large set of distinct keys, including sequential ids.
//   - Owner, OwnerOfHash, HashKey and Assign (given an out slice with enough
//     capacity) do not allocate.
//
// # Non-guarantees
//
//   - Agreement needs equal views: workers that see different memberships
//     compute different owners. hrw only says who should own a session;
//     exclusive ownership must still be enforced elsewhere (by the lease).
//   - The hash is not keyed and not cryptographic: whoever chooses the keys
//     can choose keys that all land on one node.
//   - Balance is not exact: with k keys per node expect deviations of a
//     few times sqrt(k). Bounding the loads is not hrw's job: package
//     assign does it on top of a Table, for pollworker's index buckets.
//   - Weighted results rely on the platform's natural logarithm; an ln that
//     is not correctly rounded may pick a different owner in near-ties
//     (rare: scores must agree to about the last bit of a float64).
//   - Indexes returned by OwnerOfHash and Assign are only meaningful for the
//     Table that returned them.
package hrw
