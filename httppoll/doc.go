// Package httppoll is the built-in poller.Poller of pollworker: it polls a
// session by sending an HTTP GET to the session's URL and records every
// result in a capped Redis stream.
//
// Each request carries three headers, so that the target can tell who polls
// and reject stale pollers:
//
//	X-Poll-Session  the session id
//	X-Poll-Worker   the worker id (Config.Worker)
//	X-Poll-Token    the lease's fencing token, in decimal
//
// # Guarantees
//
//   - A request runs under the context the coordinator passes, which is
//     cancelled the moment the lease stops being held, and under a timeout
//     of min(session interval, Config.Timeout): a poll never outlives its
//     interval or its lease by more than the time the transport takes to
//     notice the cancellation.
//   - At most 64 KiB of a response body are read; the body is always closed.
//   - Every poll, successful or not, adds one entry to the stream
//     keyspace.Space.Results, trimmed with XADD MAXLEN ~ Config.StreamMaxLen,
//     with the fields session, worker, token, status (0 when no response
//     arrived), latency_ms, error ("" on success) and at (start of the poll,
//     Unix milliseconds).
//   - Neither the stream nor the returned errors contain the session URL,
//     which may hold credentials or API keys in its query.
//
// # Non-guarantees
//
//   - Recording is best effort: a failed XADD is logged (once until
//     recording works again) and never turns a poll into a failure. The
//     stream is capped approximately, so it may hold slightly more than
//     StreamMaxLen entries.
//   - The fencing token is only useful if the target checks it: a request
//     sent just before the lease was lost may still arrive after the next
//     holder's first request. A target that rejects tokens lower than the
//     highest it has seen is safe against that.
//   - Poll returns an error for transport failures (including cancellation
//     and timeout) and for status codes of 500 and above; 1xx-4xx answers
//     are recorded but are not errors. The coordinator only logs and counts
//     poll errors: an error never retries the poll early nor gives up the
//     lease.
package httppoll
