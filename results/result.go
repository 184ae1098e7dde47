package results

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
)

// DefaultStreamMaxLen is the approximate number of entries kept in the
// results streams, all together: about 6 MB of Redis memory (~60 bytes an
// entry), 100 s of results at 1,000 polls/s.
const DefaultStreamMaxLen = 100_000

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("results: invalid config")

// Result is the outcome of one poll, as recorded in a results stream.
type Result struct {
	// Session and Worker are the session polled and the worker that polled.
	Session string
	Worker  string
	// Token is the lease's fencing token; 0 without a lease.
	Token int64
	// Status is the HTTP status code; 0 when no response arrived.
	Status int
	// Latency is the time the request took.
	Latency time.Duration
	// Error is the poll's error ("" on success), without the session URL.
	Error string
	// At is when the poll started.
	At time.Time
	// Changed says that the response differs from the previous poll of the
	// session, whichever worker made it (the poller compares against the
	// session's fenced state): another status (a 304 stands for the 200 it
	// revalidates), another class of failure, another ETag or another body
	// hash. A session's first poll is a change. Entries of workers older
	// than this field read as false.
	Changed bool
	// BodySHA256 is the hex SHA-256 of the content: of this response's
	// body (its first 64 KiB) for a 2xx, of the content a 304 revalidates,
	// "" for other answers or none.
	BodySHA256 string
	// Body is the first bytes of the response body, as many as the poller
	// was told to record (httppoll.Config.RecordBody; pollworker run
	// --record-body); "" when none are recorded.
	Body string
}

// values are r's stream fields, in the order of the package comment.
func (r Result) values() []any {
	v := []any{
		"session", r.Session,
		"worker", r.Worker,
		"token", r.Token,
		"status", r.Status,
		"latency_ms", strconv.FormatFloat(float64(r.Latency)/float64(time.Millisecond), 'f', 3, 64),
		"error", r.Error,
		"at", r.At.UnixMilli(),
		"changed", changedField(r.Changed),
		"body_sha256", r.BodySHA256,
	}
	if r.Body != "" {
		v = append(v, "body", r.Body)
	}
	return v
}

// changedField is the stream value of Result.Changed: "1" or "0".
func changedField(c bool) string {
	if c {
		return "1"
	}
	return "0"
}

// parseResult reads the fields of a stream entry. Missing or malformed
// fields are left at their zero value: the stream is written by workers of
// any version, and a reader shows what it can.
func parseResult(v map[string]any) Result {
	str := func(k string) string { s, _ := v[k].(string); return s }
	num := func(k string) int64 { n, _ := strconv.ParseInt(str(k), 10, 64); return n }
	r := Result{Session: str("session"), Worker: str("worker"), Token: num("token"),
		Status: int(num("status")), Error: str("error"), Changed: str("changed") == "1",
		BodySHA256: str("body_sha256"), Body: str("body")}
	if ms, err := strconv.ParseFloat(str("latency_ms"), 64); err == nil {
		r.Latency = time.Duration(ms * float64(time.Millisecond))
	}
	if at := num("at"); at != 0 {
		r.At = time.UnixMilli(at)
	}
	return r
}

// allStreams are every result stream of both layouts: the single stream
// first, then the sharded ones in order.
func allStreams(keys keyspace.Space) []string {
	out := make([]string, 0, 1+keyspace.ResultStreams)
	out = append(out, keys.Results())
	for i := range keyspace.ResultStreams {
		out = append(out, keys.ResultStream(i))
	}
	return out
}

// Write adds batch to its streams in one pipeline (which a Cluster
// client splits into one pipeline per master, sent concurrently). Each
// stream is trimmed to about maxLen entries. It returns how many entries
// were not written and the first error.
func Write(ctx context.Context, c redis.Cmdable, keys keyspace.Space, sharded bool, maxLen int64, batch []Result) (int, error) {
	if len(batch) == 0 {
		return 0, nil
	}
	pipe := c.Pipeline()
	single := keys.Results() // the stream of every result unless sharded, named once per batch
	for _, r := range batch {
		stream := single
		if sharded {
			stream = keys.ResultStreamOf(r.Session)
		}
		pipe.XAdd(ctx, &redis.XAddArgs{
			Stream: stream,
			MaxLen: maxLen,
			Approx: true,
			Values: r.values(),
		})
	}
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return 0, nil
	}
	failed := 0
	for _, cmd := range cmds {
		if cmd.Err() != nil {
			failed++
		}
	}
	if failed == 0 { // the pipeline failed before any command ran
		failed = len(batch)
	}
	return failed, err
}
