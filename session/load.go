package session

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
)

// PipelineLen is the number of commands a Store sends per pipeline (in
// BucketIDs, Fetch and its writes): a caller that reads buckets in one
// pipeline each asks for at most this many.
const PipelineLen = 1000

// Snapshot is the set of sessions as read by one Load.
type Snapshot struct {
	// Rev is the revision read before any session: reload when Store.Rev
	// differs from it.
	Rev int64
	// Sessions are the valid sessions, sorted by ID.
	Sessions []Session
	// Malformed are the entries that were skipped, sorted by ID.
	Malformed []Problem
	// BadBuckets are the keys of the index buckets of the wrong type
	// (not a set), read as empty: their sessions are not in Sessions.
	// Each is in Malformed too, with its key as ID.
	BadBuckets []string
	// BadRecord is set (wrapping ErrBadRecord) when the revision key holds
	// no revision; Rev is then -1 and the rest was read.
	BadRecord error
}

// Problem is a malformed entry: an id in the index that is invalid, or whose
// key holds a value that is not a valid session.
type Problem struct {
	// ID is the id as found in the index (possibly invalid).
	ID string
	// Err says what is wrong; it wraps ErrMalformed.
	Err error
	// Bucket is set for an index bucket of the wrong type (not a set):
	// ID is then its key, and the sessions indexed in it are not read.
	Bucket bool

	// sum fingerprints the offending value, so that Loader reports each
	// distinct problem once.
	sum uint64
}

// counterStart is the member of the changes set scored with the value the
// revision counter started at (session_changed.lua): a reader that saw a
// revision below it lost the change record.
const counterStart = "!start"

// Rev returns the session revision, 0 when the counter does not exist.
func (s *Store) Rev(ctx context.Context) (int64, error) {
	n, err := s.client.Get(ctx, s.keys.SessionRev()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if redis.HasErrorPrefix(err, "WRONGTYPE") || (err != nil && strings.Contains(err.Error(), "parsing")) {
		return 0, fmt.Errorf("read session revision: %w: key %s holds no revision (%v): pollworker never deletes it: delete or rename it (the workers then read every bucket again)", ErrBadRecord, s.keys.SessionRev(), err)
	}
	if err != nil {
		return 0, fmt.Errorf("read session revision: %w", err)
	}
	return n, nil
}

// ErrBadRecord is the error of a change record key written around the
// store (of the wrong type, or not a number).
var ErrBadRecord = errors.New("session: bad change record")

// Load reads the revision, then every index bucket, then every indexed
// session, in pipelines of 1000. Ids whose key is missing (deleted
// meanwhile) are skipped; malformed entries go to Snapshot.Malformed and do
// not fail the load. Use Loader to log them. Load reads everything: it is
// for tools; workers read only their buckets (BucketIDs, Fetch).
func (s *Store) Load(ctx context.Context) (Snapshot, error) {
	rev, err := s.Rev(ctx)
	var badRecord error
	switch {
	case errors.Is(err, ErrBadRecord):
		// The definitions are intact: read them (a backup must still
		// be possible), and say so.
		badRecord, rev = err, -1
	case err != nil:
		return Snapshot{}, fmt.Errorf("load sessions: %w", err)
	}
	all := make([]int, keyspace.SessionBuckets)
	for b := range all {
		all[b] = b
	}
	perBucket, bad, err := s.BucketIDs(ctx, all)
	if err != nil {
		return Snapshot{}, fmt.Errorf("load sessions: %w", err)
	}
	var ids []string
	for _, b := range perBucket {
		ids = append(ids, b...)
	}
	slices.Sort(ids)
	sessions, problems, err := s.Fetch(ctx, ids)
	if err != nil {
		return Snapshot{}, fmt.Errorf("load sessions: %w", err)
	}
	var badKeys []string
	for _, b := range bad {
		key := s.keys.SessionBucket(b)
		badKeys = append(badKeys, key)
		// An entry of Malformed too, so that whatever lists or counts the
		// malformed entries names it.
		problems = append(problems, Problem{ID: key, Bucket: true, Err: fmt.Errorf("%w: index bucket key %s is not a set: the sessions indexed in it are not read (pollworker never deletes it: delete or rename the key, then apply the sessions again)", ErrMalformed, key)})
	}
	slices.SortFunc(problems, func(a, b Problem) int { return strings.Compare(a.ID, b.ID) })
	return Snapshot{Rev: rev, Sessions: sessions, Malformed: problems, BadBuckets: badKeys, BadRecord: badRecord}, nil
}

// BucketSize is what changed in an index bucket: its number of ids and its
// load, as counted by the writers (keyspace.Space.SessionSizes and
// SessionLoads).
type BucketSize struct {
	Bucket, Size int
	// Load is the bucket's load in polls per day (see PollsPerDay);
	// meaningful only if Complete.
	Load int
	// Complete says the loads hash counted every session when read (see
	// Weights.Complete); a reader whose loads were incomplete rereads them
	// all (Weights) when it turns true.
	Complete bool
	// Selector is the canonical selector of the unit ("" for the bucket's
	// own unit, whose Size counts every id of the bucket; a selector's
	// Size counts its active sessions in the bucket).
	Selector string
}

// Changes returns the index buckets changed after revision since, with
// their sizes and loads, and the latest revision seen (since when nothing
// changed). A caller that has read those buckets after this call has seen
// every change up to rev. One round trip (a read-only script). If the
// change record was lost (Redis lost its data), reset is true and the
// caller must start over with Weights: the current revision is then below
// since, or the counter started afresh after since (a counter that does
// not exist starts at the server's clock in microseconds, so a revision
// counted after a loss never comes back to one seen before it).
func (s *Store) Changes(ctx context.Context, since int64) (changed []BucketSize, rev int64, reset bool, err error) {
	reply, err := s.changes.Run(ctx, s.client, s.recordKeys(), since).Slice()
	if err != nil {
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			if cerr := s.checkRecord(ctx); cerr != nil {
				err = cerr // names the key
			}
		}
		return nil, 0, false, fmt.Errorf("read session changes: %w", err)
	}
	if len(reply) < 2 || len(reply)%4 != 2 {
		return nil, 0, false, fmt.Errorf("read session changes: reply of %d values", len(reply))
	}
	now, ok := reply[0].(int64)
	if !ok {
		return nil, 0, false, fmt.Errorf("read session changes: revision %v", reply[0])
	}
	if now < since {
		return nil, now, true, nil
	}
	complete := reply[1] == int64(1)
	rev = since
	for i := 2; i < len(reply); i += 4 {
		if reply[i] == counterStart {
			return nil, now, true, nil // counted afresh since: the record before is gone
		}
		b, sel, ok := ParseUnit(fmt.Sprint(reply[i]))
		if !ok {
			continue // not written by Store
		}
		if score, err := strconv.ParseFloat(fmt.Sprint(reply[i+1]), 64); err == nil {
			rev = max(rev, int64(score))
		}
		changed = append(changed, BucketSize{Bucket: b, Selector: sel, Size: sizeOf(reply[i+2]), Load: sizeOf(reply[i+3]), Complete: complete})
	}
	return changed, rev, false, nil
}

// Sizes returns the current revision and the size of every bucket (indexed
// by bucket), read in one round trip: the starting point for Changes.
func (s *Store) Sizes(ctx context.Context) (rev int64, sizes []int, err error) {
	var cur *redis.StringCmd
	var all *redis.MapStringStringCmd
	_, err = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		cur = p.Get(ctx, s.keys.SessionRev())
		all = p.HGetAll(ctx, s.keys.SessionSizes())
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, nil, fmt.Errorf("read session bucket sizes: %w", err)
	}
	rev, err = cur.Int64()
	if errors.Is(err, redis.Nil) {
		rev, err = 0, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("read session revision: %w", err)
	}
	sizes = make([]int, keyspace.SessionBuckets)
	for k, v := range all.Val() {
		if b, err := strconv.Atoi(k); err == nil && b >= 0 && b < len(sizes) {
			sizes[b] = sizeOf(v)
		}
	}
	return rev, sizes, nil
}

// sizeOf reads a bucket size (a string, or nil when absent); anything but a
// positive integer counts as 0.
func sizeOf(v any) int {
	str, _ := v.(string)
	n, err := strconv.Atoi(str)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// BucketIDs returns the ids in each of the given index buckets (out[i] for
// buckets[i]), sorted, with SMEMBERS in pipelines of 1000 buckets. A
// bucket key of the wrong type (written around the store) is one bucket's
// problem: it reads as empty and is listed in bad; pollworker never
// deletes it.
func (s *Store) BucketIDs(ctx context.Context, buckets []int) (out [][]string, bad []int, err error) {
	out = make([][]string, 0, len(buckets))
	for chunk := range slices.Chunk(buckets, PipelineLen) {
		cmds := make([]*redis.StringSliceCmd, len(chunk))
		_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, b := range chunk {
				cmds[i] = p.SMembers(ctx, s.keys.SessionBucket(b))
			}
			return nil
		})
		for i, c := range cmds {
			ids, err := c.Result()
			if redis.HasErrorPrefix(err, "WRONGTYPE") {
				bad = append(bad, chunk[i])
				out = append(out, nil)
				continue
			}
			if err != nil {
				return nil, nil, fmt.Errorf("read session index bucket %d: %w", chunk[i], err)
			}
			slices.Sort(ids)
			out = append(out, ids)
		}
	}
	return out, bad, nil
}

// Fetch reads and decodes the sessions ids (as found in the index, valid or
// not) in pipelines of 1000. It returns the valid sessions (paused ones
// too) and the malformed entries, both in the order of ids; ids whose key
// is missing are skipped. Only a Redis failure is an error.
func (s *Store) Fetch(ctx context.Context, ids []string) ([]Session, []Problem, error) {
	sessions := make([]Session, 0, len(ids))
	var problems []Problem
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if err := keyspace.ValidateID(id); err != nil {
			problems = append(problems, Problem{ID: id, Err: fmt.Errorf("%w: id in the index: %w", ErrMalformed, err), sum: fingerprint(nil, err)})
			continue
		}
		valid = append(valid, id)
	}
	for chunk := range slices.Chunk(valid, PipelineLen) {
		got, err := s.fetch(ctx, chunk)
		if err != nil {
			return nil, nil, err
		}
		for i, f := range got {
			id := chunk[i]
			if f.missing {
				continue
			}
			err := f.err
			if err == nil {
				var sess Session
				if sess, err = Decode(id, f.raw); err == nil {
					sessions = append(sessions, sess)
					continue
				}
			}
			problems = append(problems, Problem{ID: id, Err: err, sum: fingerprint(f.raw, err)})
		}
	}
	slices.SortFunc(problems, func(a, b Problem) int { return strings.Compare(a.ID, b.ID) })
	return sessions, problems, nil
}

// List returns the valid sessions sorted by id and the malformed entries,
// for the command-line tool.
func (s *Store) List(ctx context.Context) ([]Session, []Problem, error) {
	snap, err := s.Load(ctx)
	return snap.Sessions, snap.Malformed, err
}

// fetched is the outcome of reading one session key.
type fetched struct {
	raw     []byte // at most MaxValueBytes+1 bytes
	missing bool   // the key does not exist
	err     error  // wraps ErrMalformed: wrong type or oversize
}

// fetch reads the keys of ids (valid ids) in one pipeline of GETRANGE, so
// that at most MaxValueBytes+1 bytes of a value travel, plus one pipeline of
// EXISTS for the empty replies, which GETRANGE gives for missing keys too.
// Errors other than WRONGTYPE fail the whole fetch. Of the bounded reads this
// costs Redis the least CPU per key: one script per batch doing the same
// GETRANGE per key costs about twice as much (each call from Lua converts
// its reply into Lua and back); MGET costs less but reads whole values and
// answers nil for a key of another type (BenchmarkReadValues).
func (s *Store) fetch(ctx context.Context, ids []string) ([]fetched, error) {
	cmds := make([]*redis.StringCmd, len(ids))
	// Errors are read per command below: a WRONGTYPE reply is a malformed
	// entry, not a failed pipeline.
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.GetRange(ctx, s.keys.Session(id), 0, MaxValueBytes)
		}
		return nil
	})
	out := make([]fetched, len(ids))
	var empty []int
	for i, c := range cmds {
		f, err := classify(c)
		if err != nil {
			return nil, fmt.Errorf("read session %s: %w", ids[i], err)
		}
		if f.raw == nil && f.err == nil {
			empty = append(empty, i)
		}
		out[i] = f
	}
	if len(empty) == 0 {
		return out, nil
	}
	exists := make([]*redis.IntCmd, len(empty))
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for j, i := range empty {
			exists[j] = p.Exists(ctx, s.keys.Session(ids[i]))
		}
		return nil
	})
	for j, i := range empty {
		n, err := exists[j].Result()
		if err != nil {
			return nil, fmt.Errorf("read session %s: %w", ids[i], err)
		}
		out[i].missing = n == 0
		out[i].raw = []byte{} // present and empty: Decode reports it
	}
	return out, nil
}

// fetchOne is fetch for one key inside a WATCH transaction. The reads are
// not atomic with each other: a value written or deleted between them can
// make a present key look empty. The caller confirms what it reports with
// the transaction's EXEC, which fails if the key changed since WATCH.
func (s *Store) fetchOne(ctx context.Context, tx *redis.Tx, key string) (fetched, error) {
	f, err := classify(tx.GetRange(ctx, key, 0, MaxValueBytes))
	if err != nil || f.raw != nil || f.err != nil {
		return f, err
	}
	n, err := tx.Exists(ctx, key).Result()
	if err != nil || n == 0 {
		return fetched{missing: true}, err
	}
	return fetched{raw: []byte{}}, nil // present and empty: Decode reports it
}

// classify turns a GETRANGE reply into a fetched value (raw nil and err nil
// meaning an empty reply: missing or empty key), or a Redis failure.
func classify(c *redis.StringCmd) (fetched, error) {
	raw, err := c.Bytes()
	switch {
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return fetched{err: fmt.Errorf("%w: key holds another Redis type than a string", ErrMalformed)}, nil
	case err != nil:
		return fetched{}, err
	case len(raw) == 0:
		return fetched{}, nil
	case len(raw) > MaxValueBytes:
		return fetched{raw: raw, err: fmt.Errorf("%w: value has more than %d bytes", ErrMalformed, MaxValueBytes)}, nil
	}
	return fetched{raw: raw}, nil
}

// fingerprint identifies a problem by its value and reason.
func fingerprint(raw []byte, err error) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(raw)
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(err.Error()))
	return h.Sum64()
}
