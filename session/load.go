package session

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
)

// batch is the SSCAN COUNT and the number of GETs per pipeline in Load.
const batch = 1000

// Snapshot is the set of sessions as read by one Load.
type Snapshot struct {
	// Rev is the revision read before any session: reload when Store.Rev
	// differs from it.
	Rev int64
	// Sessions are the valid sessions, sorted by ID.
	Sessions []Session
	// Malformed are the entries that were skipped, sorted by ID.
	Malformed []Problem
}

// Problem is a malformed entry: an id in the index that is invalid, or whose
// key holds a value that is not a valid session.
type Problem struct {
	// ID is the id as found in the index (possibly invalid).
	ID string
	// Err says what is wrong; it wraps ErrMalformed.
	Err error

	// sum fingerprints the offending value, so that Loader reports each
	// distinct problem once.
	sum uint64
}

// Rev returns the session revision, 0 when the counter does not exist.
func (s *Store) Rev(ctx context.Context) (int64, error) {
	n, err := s.client.Get(ctx, s.keys.SessionRev()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read session revision: %w", err)
	}
	return n, nil
}

// Load reads the revision, then the index, then every indexed session, in
// pipelines of 1000. Ids whose key is missing (deleted meanwhile) are
// skipped; malformed entries go to Snapshot.Malformed and do not fail the
// load. Use Loader to log them.
func (s *Store) Load(ctx context.Context) (Snapshot, error) {
	rev, err := s.Rev(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("load sessions: %w", err)
	}
	ids, err := s.index(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("load sessions: %w", err)
	}
	snap := Snapshot{Rev: rev, Sessions: make([]Session, 0, len(ids))}
	var valid []string
	for _, id := range ids {
		if err := keyspace.ValidateID(id); err != nil {
			snap.Malformed = append(snap.Malformed, Problem{ID: id, Err: fmt.Errorf("%w: id in the index: %w", ErrMalformed, err), sum: fingerprint(nil, err)})
			continue
		}
		valid = append(valid, id)
	}
	for chunk := range slices.Chunk(valid, batch) {
		got, err := s.fetch(ctx, chunk)
		if err != nil {
			return Snapshot{}, fmt.Errorf("load sessions: %w", err)
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
					snap.Sessions = append(snap.Sessions, sess)
					continue
				}
			}
			snap.Malformed = append(snap.Malformed, Problem{ID: id, Err: err, sum: fingerprint(f.raw, err)})
		}
	}
	slices.SortFunc(snap.Malformed, func(a, b Problem) int { return strings.Compare(a.ID, b.ID) })
	return snap, nil
}

// List returns the valid sessions sorted by id and the malformed entries,
// for the command-line tool.
func (s *Store) List(ctx context.Context) ([]Session, []Problem, error) {
	snap, err := s.Load(ctx)
	return snap.Sessions, snap.Malformed, err
}

// index returns the ids in the index, sorted and without duplicates (SSCAN
// may return an id twice).
func (s *Store) index(ctx context.Context) ([]string, error) {
	var ids []string
	var cursor uint64
	for {
		page, next, err := s.client.SScan(ctx, s.keys.SessionIndex(), cursor, "", batch).Result()
		if err != nil {
			return nil, fmt.Errorf("scan session index: %w", err)
		}
		ids = append(ids, page...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
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
// Errors other than WRONGTYPE fail the whole fetch.
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

// fetchOne is fetch for one key inside a WATCH transaction.
func (s *Store) fetchOne(ctx context.Context, tx *redis.Tx, key string) (fetched, error) {
	f, err := classify(tx.GetRange(ctx, key, 0, MaxValueBytes))
	if err != nil || f.raw != nil || f.err != nil {
		return f, err
	}
	n, err := tx.Exists(ctx, key).Result()
	if err != nil {
		return fetched{}, err
	}
	return fetched{raw: []byte{}, missing: n == 0}, nil
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
