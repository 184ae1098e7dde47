// Package httppoll is the built-in poller.Poller of pollworker: it polls a
// session by sending the session's request (session.Session: Method, GET by
// default, Headers, Body) to its URL and records the results in capped
// Redis streams (package results, whose Reader reads them back merged).
//
// Each request carries three headers (four for a scheduled session), so
// that the target can tell who polls
// and reject stale pollers; a session's headers never override them:
//
//	X-Poll-Session  the session id
//	X-Poll-Worker   the worker id (Config.Worker)
//	X-Poll-Token    the lease's fencing token, in decimal
//	X-Poll-Slot     for a scheduled session, the slot's time (RFC 3339, UTC)
//
// # Guarantees
//
//   - A request runs under the context the coordinator passes, which is
//     cancelled the moment the lease stops being held, and under a timeout
//     of RequestTimeout (the session's Timeout, or Config.Timeout; at most
//     its interval) that also bounds the wait for a slot of its host: a
//     poll never outlives its interval or its lease by more than the time
//     the transport takes to notice the cancellation.
//   - At most Config.MaxPerHost requests (64 by default) are in flight to
//     one host (host and port of the URL) from one Poller. Under a
//     poller.Coordinator the bound is kept by its scheduler (PollGroup): a
//     due poll of a full host waits there for its fair turn, and the wait
//     is no failure. Called directly, a poll waits for a slot at most half
//     its timeout, so that the request it sends has at least the other
//     half, then returns poller.ErrNoCapacity without sending anything; a
//     request abandoned at its timeout frees its slot, though the target
//     may still be serving it.
//   - With saved state (the Turn's State, under a Coordinator with
//     poller.Config.Stateful, as pollworker run sets it), each request is conditional on the ETag
//     and Last-Modified of the session's last 2xx answer, saved by
//     whichever worker polled it before; a 304 is a success and no change.
//     The session's State (status, latency, body hash, last success,
//     consecutive failures, last change, validators, backoff) is saved when
//     something an operator needs to see changed, else at most every
//     Config.StateRefresh (60s): see State. A save is fenced by the lease
//     (state.ErrStale for a holder that lost it); a failed save is logged
//     and counted (Stats), never retried, and never fails the poll.
//   - At most 64 KiB of a response body are read; the body is always closed.
//   - With Config.Record results.RecordAll (the default) every poll,
//     successful or not, adds one entry to a results stream (package
//     results describes the format and the layout). With RecordChanges,
//     only a result that says the response changed; with RecordNone, none.
//   - Each result says whether the response changed (results.Result.Changed):
//     another status (a 304 stands for the 200 it revalidates), class of
//     failure, ETag or 2xx body hash than the session's previous poll.
//     With saved state the previous poll is the saved State,
//     whichever worker saved it, so a change is reported once across
//     handoffs (a change is always saved at once); a session's first poll
//     is a change. Without it, this Poller's memory of the session
//     (Config.ChangesMemory) is compared. A result carries the content's
//     hash (2xx and 304) and, with Config.RecordBody, the body's first
//     bytes. A poll cut short by its lease ending is no change.
//   - With a results.Recorder (what pollworker run uses), Poll never waits
//     for Redis: it hands each result over and the Recorder writes them in
//     batches. Without one, Poll writes its result with one XADD bounded
//     by Config.RecordTimeout.
//   - Neither the stream nor the returned errors contain the session URL,
//     which may hold credentials or API keys in its query.
//
// # Non-guarantees
//
//   - Recording is best effort: a failed write is logged (once until
//     recording works again) and counted, never retried, and never turns a
//     poll into a failure (see package results).
//   - The fencing token is only useful if the target checks it: a request
//     sent just before the lease was lost may still arrive after the next
//     holder's first request. A target that rejects tokens lower than the
//     highest it has seen is safe against that.
//   - Poll returns an error for transport failures (including cancellation
//     and timeout) and for a status the session does not expect
//     (session.Session.Expect, 200-399 by default: a 4xx or 5xx fails;
//     a 304 to a conditional request stands for the 200 it revalidates). The coordinator only logs and counts
//     poll errors: an error never retries the poll early nor gives up the
//     lease.
package httppoll
