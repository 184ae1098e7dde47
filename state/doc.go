// Package state keeps a small, fenced state per session in Redis: what a
// poller needs to carry from one poll to the next (a cursor, an ETag, a page
// token) across handoffs, crashes and restarts.
//
// A session's state is the hash <prefix>:state:{<session>} (keyspace
// Space.State), in the slot of its lease: the data, the fencing token of the
// lease that wrote it, when it was written and when the poll that wrote it
// started (both on the Redis server's clock, in ms).
//
// # Guarantees
//
//   - Fenced writes. Store.Save runs one script that writes only if the
//     session's lease key holds exactly the writer's owner value (its
//     acquisition is the current one: not expired, released or taken by
//     another) and the writer's token is at least the token that wrote the
//     stored state. Otherwise nothing is written and Save returns ErrStale.
//     A holder that was paused or partitioned past its TTL therefore can
//     never overwrite the state of its successor, and the token of the
//     stored state never goes backwards.
//   - Errors are never read as success: a Save whose reply is an error or
//     is lost returns that error (the write may or may not have happened;
//     saving again under the same lease is safe).
//   - A load under a lease sees every earlier holder's last save: once a
//     lease is acquired, no earlier acquisition can pass the check, so a
//     state read after acquiring is the last one written before it.
//   - A corrupt state never blocks its session nor fails the others: a
//     state key of another type than hash (an operator's or another
//     program's), or a hash whose token, saved or polled field is not a
//     decimal, or whose token is above every fencing token (2^53-1 or
//     more), reads as never saved with Record.Corrupt saying why, in Load
//     as in every batch of LoadMany. It is never deleted by a read: an
//     operator may need it; the next fenced Save overwrites it.
//   - Oversized data (over the Store's limit, DefaultMaxSize unless set
//     with WithMaxSize) is refused with ErrTooLarge before anything is
//     sent; the stored state is unchanged.
//
// # Non-guarantees
//
//   - The state has no TTL: it outlives its session until someone calls
//     Store.Delete (pollworker sessions rm does not, so a session added
//     again under the same id goes on from its state).
//     Under a maxmemory policy that evicts (allkeys-*), or after a data loss
//     of Redis, it may be lost; a lost state reads as never saved (Token 0).
//   - A save is not replicated synchronously: a failover to a replica that
//     missed it loses it (as it may lose the lease itself).
//   - Tokens are compared as Lua doubles, exact up to 2^53 (the year 2255 for
//     the clock-based tokens of package lease, which mints none above
//     2^53-1). Record.Token is an int64, as lease.Lease.Token.
package state
