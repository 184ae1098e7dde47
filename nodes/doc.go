// Package nodes is the membership registry of pollworker: each worker
// heartbeats into Redis and discovers its live peers, so that rendezvous
// hashing over the live set can decide who polls which session.
//
// A worker is live while its entry in the node index (a sorted set at
// keyspace.Space.NodeIndex, scored by expiry in Redis server milliseconds)
// has not expired, its id is a valid id (keyspace.ValidateID) and its
// heartbeat key (keyspace.Space.Node) exists: any other entry (written by
// hand or by another program, or that of a worker caught between deleting
// its key and its entry) is not a member but Membership.Junk, and
// ForgetJunk or Forget removes it. Heartbeat first claims the id: it sets a JSON Info at
// keyspace.Space.Node, with the TTL, only if that key is absent or holds an
// Info of this Registry's random incarnation (scripts/lua/node_claim.lua; the
// incarnation is compared, so the Registry may change its weight); then
// it moves the index entry's expiry to server time + TTL, and prunes the
// expired entries. Members returns the live set and writes nothing. The index scripts read Redis
// TIME, so expiry is judged by one clock, the server's, never by the
// workers' clocks. Discovery reads only the index and, in one pipeline of
// GETs, the heartbeat keys of its valid entries: it never uses SCAN or
// KEYS, whose cost grows with the whole keyspace.
//
// Guarantees:
//   - A worker that stops heartbeating drops out of Members once TTL has
//     passed since its last successful Heartbeat (by the server's clock).
//   - Membership.Version, local to one Registry, increases exactly when the
//     set of ids it observes changes, not when expiries move.
//   - Leave removes the worker at once, for graceful shutdown, but only the
//     entries its own incarnation wrote.
//   - One id, one incarnation: while one Registry holds its id's claim, a
//     heartbeat of any other Registry with that id (another process started
//     with the same id, or one that stopped heartbeating past its TTL and
//     lost the id) writes nothing and returns ErrDuplicateID. WaitForID lets
//     a worker restarted after a crash wait (at most one TTL) for the dead
//     incarnation's claim to expire, and refuses an id whose holder still
//     heartbeats.
//
// Non-guarantees:
//   - Membership is eventually consistent. Two workers that call Members at
//     different moments may briefly disagree on the live set, and so on who
//     owns a session; a worker may still appear live up to TTL after it
//     crashed, and a paused or partitioned worker may believe itself a member
//     after the others have dropped it.
//   - Versions are not comparable between Registries or across restarts.
//   - Events published on keyspace.Space.Events are Pub/Sub: fire and
//     forget, lost while a subscriber is disconnected. They are hints that
//     speed up reaction, never the source of truth; workers must still poll
//     Members periodically.
//
// Safety never depends on membership: two workers that disagree may both try
// to poll a session, and only the session's lease (package lease) decides
// which one may. Membership only spreads the work.
//
// Requires Redis 5 or newer (scripts call TIME before writing, which needs
// script effects replication, the default since Redis 5). Each script touches
// one key, so Redis Cluster works; that is why the claim and the index entry
// are two scripts, and a heartbeat two round trips.
package nodes
