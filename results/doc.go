// Package results records poll results in capped Redis streams and reads
// them back: Recorder writes them in batches, Write writes a batch at once,
// and Reader reads and follows every stream merged in order of poll start.
// httppoll's Poller produces the results; any poller may.
//
// # The stream format
//
// Each result is one stream entry (see Result) with the fields session,
// worker, token (the lease's fencing token, 0 without a lease), status (0
// when no response arrived), latency_ms, error ("" on success), at (start
// of the poll, Unix milliseconds), changed ("1" when the response differs
// from the session's previous poll, across handoffs, else "0"),
// body_sha256 (hex SHA-256 of the content, "" unless a 2xx or 304) and,
// only when the poller records bodies, body (the first bytes of the
// response body). A reader shows what it can of an
// entry whose fields are missing or malformed: the streams are written by
// workers of any version.
//
// Layout: one stream, keyspace.Space.Results, or with
// RecorderConfig.Sharded (Redis Cluster) keyspace.ResultStreams streams
// chosen by the session's bucket range, whose hash tags spread over the
// hash slots. Each stream is trimmed with XADD MAXLEN ~ (the total cap
// divided by the number of streams). A Reader reads both layouts.
//
// # Guarantees
//
//   - A Recorder's Add never waits for Redis: results are queued (at most
//     RecorderConfig.QueueSize; when full the oldest is dropped and
//     counted) and written by the Recorder's goroutine in one pipeline per
//     flush, every FlushInterval (100ms) or as soon as BatchSize (500)
//     wait.
//
// # Non-guarantees
//
//   - Recording is best effort: a failed write is logged (once until
//     recording works again) and counted, never retried; results dropped
//     from a full queue are counted (RecorderStats). The streams are
//     capped approximately, so they may hold slightly more than their cap.
//     Retention is a number of entries, not a time: cap / results per
//     second.
//   - Order: entries of one stream are in the order of their flush, not of
//     their poll; the Reader sorts by poll start, and a slow poll may be
//     recorded after faster ones that started later.
package results
