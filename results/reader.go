package results

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
)

// Bounds of the Reader.
const (
	// DefaultReadLimit is the default of Query.Limit.
	DefaultReadLimit = 100
	// MaxReadLimit is the largest Query.Limit.
	MaxReadLimit = 100_000
	// readChunk is the COUNT of each XREVRANGE and XREAD.
	readChunk = 1000
	// maxScan bounds the entries Read looks at per stream when filtering by
	// session (the streams are capped, so this is only a safety net).
	maxScan = 1_000_000
	// followBlock is the BLOCK of each XREAD of Follow: how long a stopped
	// Follow may take to return.
	followBlock = time.Second
)

// Entry is one entry of a results stream.
type Entry struct {
	// Stream and ID locate the entry; the ID's first part is the Redis
	// server's time of the XADD, in milliseconds.
	Stream string
	ID     string
	Result
}

// Query selects the entries Read and Follow return.
type Query struct {
	// Session keeps only this session's results; "" keeps all.
	Session string
	// Changed keeps only the results that say the response changed
	// (Result.Changed).
	Changed bool
	// Since keeps only entries added in the last Since, by the Redis
	// server's clock; 0 keeps all.
	Since time.Duration
	// Limit is how many entries Read returns at most (the most recent
	// ones); default DefaultReadLimit, at most MaxReadLimit.
	Limit int
}

// Reader reads the results streams of both layouts (the single stream and
// the sharded ones), so it needs no setting to match the workers'. It only
// reads, and starts no goroutines beyond Follow's, which Follow joins.
type Reader struct {
	client  redis.UniversalClient
	keys    keyspace.Space
	cluster bool
}

// NewReader returns a Reader of the streams of keys.
func NewReader(client redis.UniversalClient, keys keyspace.Space) (*Reader, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: reader: client is required", ErrConfig)
	}
	if err := keys.Validate(); err != nil {
		return nil, fmt.Errorf("%w: reader: Keys: %w", ErrConfig, err)
	}
	_, cluster := client.(*redis.ClusterClient)
	return &Reader{client: client, keys: keys, cluster: cluster}, nil
}

// Cursor is where Follow goes on: the last entry id seen in each stream.
type Cursor map[string]string

// streams are the streams that may hold results of q.
func (r *Reader) streams(q Query) []string {
	if q.Session != "" {
		return []string{r.keys.Results(), r.keys.ResultStreamOf(q.Session)}
	}
	return allStreams(r.keys)
}

// filtered reports whether q keeps only some entries of a stream.
func (q Query) filtered() bool { return q.Session != "" || q.Changed }

// keeps reports whether q keeps e.
func (q Query) keeps(e Entry) bool {
	return (q.Session == "" || e.Session == q.Session) && (!q.Changed || e.Changed)
}

func (q Query) limit() (int, error) {
	switch {
	case q.Limit == 0:
		return DefaultReadLimit, nil
	case q.Limit < 0 || q.Limit > MaxReadLimit:
		return 0, fmt.Errorf("%w: limit %d must be from 1 to %d", ErrConfig, q.Limit, MaxReadLimit)
	}
	return q.Limit, nil
}

// startID is the first stream id of q's window: "-" or "<ms>-0".
func (r *Reader) startID(ctx context.Context, q Query) (string, error) {
	if q.Since <= 0 {
		return "-", nil
	}
	now, err := r.client.Time(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("time: %w", err)
	}
	return strconv.FormatInt(now.Add(-q.Since).UnixMilli(), 10) + "-0", nil
}

// Read returns the q.Limit most recently recorded matching entries of all
// streams (by the Redis time of their XADD, to the millisecond), in order
// of poll start (see sortEntries), and the cursor from which Follow
// continues after them.
func (r *Reader) Read(ctx context.Context, q Query) ([]Entry, Cursor, error) {
	limit, err := q.limit()
	if err != nil {
		return nil, nil, err
	}
	start, err := r.startID(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	streams := r.streams(q)
	sc := newScan(q, limit, start, streams)
	todo := streams
	for scanned := 0; len(todo) > 0 && scanned < maxScan; scanned += sc.chunk {
		if todo, err = sc.round(ctx, r.client, todo); err != nil {
			return nil, nil, err
		}
	}
	return sc.newest(), sc.cur, nil
}

// scan is one Read going back through the streams, newest first.
type scan struct {
	q      Query
	limit  int
	chunk  int    // entries per stream and round
	start  string // the oldest ID read ("-": from the beginning)
	cur    Cursor // each stream's newest entry (where Follow continues)
	end    map[string]string
	out    []Entry
	counts map[string]int // matches per stream
}

// newScan starts a scan of streams. Without a filter, the newest limit
// entries of each stream hold the newest limit of all; with one, it reads
// chunks until limit match.
func newScan(q Query, limit int, start string, streams []string) *scan {
	sc := &scan{q: q, limit: limit, chunk: readChunk, start: start, cur: Cursor{}, end: map[string]string{}, counts: map[string]int{}}
	if !q.filtered() {
		sc.chunk = limit
	}
	for _, s := range streams {
		sc.cur[s], sc.end[s] = "0-0", "+"
		if start != "-" {
			sc.cur[s] = start
		}
	}
	return sc
}

// round reads the next chunk of every stream of todo in one pipeline (one
// round trip per master) and returns the streams still short of matches.
func (sc *scan) round(ctx context.Context, client redis.UniversalClient, todo []string) ([]string, error) {
	pipe := client.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(todo))
	for i, s := range todo {
		cmds[i] = pipe.XRevRangeN(ctx, s, sc.end[s], sc.start, int64(sc.chunk))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read results: %w", err)
	}
	var next []string
	for i, s := range todo {
		if sc.take(s, cmds[i].Val()) {
			next = append(next, s)
		}
	}
	return next, nil
}

// take keeps the matching entries of msgs, read from stream s, and
// reports whether s is to be read further.
func (sc *scan) take(s string, msgs []redis.XMessage) (more bool) {
	if len(msgs) > 0 && sc.end[s] == "+" {
		sc.cur[s] = msgs[0].ID // the newest entry of the stream
	}
	for _, m := range msgs {
		e := Entry{Stream: s, ID: m.ID, Result: parseResult(m.Values)}
		if sc.q.keeps(e) {
			sc.out = append(sc.out, e)
			sc.counts[s]++
		}
	}
	if sc.q.filtered() && sc.counts[s] < sc.limit && len(msgs) == sc.chunk {
		sc.end[s] = "(" + msgs[len(msgs)-1].ID
		return true
	}
	return false
}

// newest is the limit most recently recorded entries kept, shown by poll
// start.
func (sc *scan) newest() []Entry {
	out := sc.out
	if len(out) > sc.limit {
		slices.SortStableFunc(out, func(a, b Entry) int {
			return cmp.Or(cmp.Compare(idMillis(b.ID), idMillis(a.ID)), b.At.Compare(a.At))
		})
		out = out[:sc.limit]
	}
	sortEntries(out)
	return out
}

// Follow calls fn with each batch of new matching entries after cur (from
// Read), each batch in time order, until ctx is done (it then returns nil)
// or a read or fn fails. It reads with XREAD BLOCK: one command for every
// stream outside Cluster, one goroutine per stream in Cluster (a command
// may not span hash slots); fn is called from Follow's goroutine only.
// A result recorded late (a slow poll, a flush delayed by a slow Redis) may
// come after results that started later.
func (r *Reader) Follow(ctx context.Context, q Query, cur Cursor, fn func([]Entry) error) error {
	streams := r.streams(q)
	groups := [][]string{streams}
	if r.cluster {
		groups = groups[:0]
		for _, s := range streams {
			groups = append(groups, []string{s})
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []Entry)
	errs := make(chan error, len(groups))
	for _, g := range groups {
		ids := make([]string, len(g))
		for i, s := range g {
			ids[i] = cmp.Or(cur[s], "$")
		}
		go func() { errs <- r.tail(ctx, q, g, ids, batches) }()
	}
	running := len(groups)
	var failed error
	for running > 0 {
		select {
		case b := <-batches:
			// Take what else is ready now, so that one batch is sorted
			// across streams.
			for more := true; more; {
				select {
				case b2 := <-batches:
					b = append(b, b2...)
				default:
					more = false
				}
			}
			sortEntries(b)
			if err := fn(b); err != nil && failed == nil {
				failed = err
				cancel()
			}
		case err := <-errs:
			running--
			if err != nil && failed == nil && ctx.Err() == nil {
				failed = err
				cancel()
			}
		}
	}
	return failed
}

// tail reads streams from ids with XREAD BLOCK and sends the matching
// entries to out until ctx is done.
func (r *Reader) tail(ctx context.Context, q Query, streams, ids []string, out chan<- []Entry) error {
	args := &redis.XReadArgs{Streams: make([]string, 0, 2*len(streams)), Count: readChunk, Block: followBlock}
	for ctx.Err() == nil {
		args.Streams = append(append(args.Streams[:0], streams...), ids...)
		res, err := r.client.XRead(ctx, args).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("follow results: %w", err)
		}
		var batch []Entry
		for _, xs := range res {
			i := slices.Index(streams, xs.Stream)
			for _, m := range xs.Messages {
				if i >= 0 {
					ids[i] = m.ID
				}
				e := Entry{Stream: xs.Stream, ID: m.ID, Result: parseResult(m.Values)}
				if q.keeps(e) {
					batch = append(batch, e)
				}
			}
		}
		if len(batch) == 0 {
			continue
		}
		select {
		case out <- batch:
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// sortEntries orders entries by the start of their poll, then by the time
// they were recorded (the id's milliseconds), stream and id.
func sortEntries(es []Entry) {
	slices.SortStableFunc(es, func(a, b Entry) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(idMillis(a.ID), idMillis(b.ID)),
			strings.Compare(a.Stream, b.Stream), cmp.Compare(idSeq(a.ID), idSeq(b.ID)))
	})
}

func idMillis(id string) int64 {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return n
}

func idSeq(id string) int64 {
	_, seq, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(seq, 10, 64)
	return n
}
