// Package session stores the polling jobs ("sessions") in Redis and reads
// them back for the workers.
//
// A session is a JSON document at keyspace.Space.Session(id). The index is
// split into keyspace.SessionBuckets sets, so that a worker reads only the
// buckets assigned to it:
//
//	<sessionPrefix>:<id>          the session's JSON (see Session)
//	<prefix>:sessions:<b>         the ids of bucket b = keyspace.BucketOf(id)
//	<prefix>:{sessions}:rev       change counter, incremented by every write;
//	                              a missing one starts at Redis time (µs)
//	<prefix>:{sessions}:changes   bucket -> revision of its last change;
//	                              "!start" -> the value the counter started at
//	<prefix>:{sessions}:sizes     bucket -> number of ids in it
//	<prefix>:{sessions}:loads     placement unit -> polls per day (weight.go)
//	<prefix>:{sessions}:settings  url-rule -> http or any (URLRule, url.go)
//
// so that a worker learns what changed with one round trip per round
// (Store.Changes: nothing, or the buckets changed since the revision it has
// seen) and rereads only those buckets (BucketIDs, Fetch). Every write also
// publishes {"type":"sessions","sessions":[id]} on keyspace.Space.Events
// (a nodes.Event of type EventSessions, encoded by package nodes), so that
// workers react at once.
//
// # Guarantees
//
//   - No lost change. A write stores the data (SET and SADD, or DEL and SREM)
//     and only after Redis acknowledged it increments the counter and records
//     the bucket's change, atomically in one script; readers read the
//     counter and the changes first and the data afterwards. So a Snapshot includes every
//     write whose increment preceded its Rev, and any write it may have
//     missed leaves the counter different from Snapshot.Rev: a worker that
//     reloads whenever Rev() != last Snapshot.Rev converges. Compare with !=,
//     not >: if the counter key is lost (a Redis restart without
//     persistence), Rev falls back to 0, which also triggers a reload.
//   - A failed write can be retried: every successful Put, Delete, Pause and
//     Resume increments the counter even when it changed nothing, so retrying
//     a write whose increment failed still announces it.
//   - Malformed entries (bad JSON, a key of another Redis type, a missing
//     url, a bad interval, an oversize value, an invalid id in the index) are
//     reported in Snapshot.Malformed, never deleted, and never stop the good
//     sessions from loading. Loader logs each distinct problem once.
//   - No command spans two hash slots in one MULTI or script, so Redis
//     Cluster works. Pause and Resume are optimistic read-modify-write
//     transactions (WATCH) on the one session key.
//   - Unknown fields are ignored by Decode (forward compatibility) and kept
//     by Pause and Resume, which rewrite only the "paused" field. Put replaces
//     the whole document.
//
// # Non-guarantees
//
//   - Bucket sizes are counted by the writers from the SADD/SREM replies: a
//     writer that dies between its data write and its change record leaves
//     the size off by one (the next write to that bucket does not repair
//     it). Sizes only weigh buckets for balance; ownership and safety do
//     not depend on them.
//   - Loads (polls per day per placement unit, weight.go) are counted the
//     same way, from the value each write replaces (SET … GET, GETDEL): a
//     writer that dies before its change record, or a value written behind
//     the store's back, leaves a unit's load off until Store.RebuildLoads.
//     Loads and selectors weigh and group sessions for placement only; a
//     worker checks a session's selector itself before it polls it.
//   - A Snapshot is not atomic: it may mix the states before and after a
//     concurrent write (its Rev then differs from the counter, see above).
//   - Put and Delete of the same id racing each other may leave the index
//     and the session key disagreeing: an id without a key is skipped, a key
//     without an id in the index is invisible until the next Put of that id.
//   - Events are Pub/Sub hints, lost while a subscriber is disconnected, and
//     a failed publish is only logged; workers must still check Rev
//     periodically.
//   - Values are read with GETRANGE bounded to MaxValueBytes+1 bytes, so an
//     enormous value costs little to reject; but a value that is created
//     between the two reads that tell "missing" from "empty" may be reported
//     once as empty (the following reload sees it).
package session
