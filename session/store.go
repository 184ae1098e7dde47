package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/scripts/lua"
)

// ErrNotFound is returned (wrapped) for a session that does not exist.
var ErrNotFound = errors.New("session: not found")

// maxWatchRetries bounds the optimistic retries of Pause and Resume.
const maxWatchRetries = 16

// Store reads and writes sessions. It starts no goroutines and is safe for
// concurrent use.
type Store struct {
	client  redis.UniversalClient
	keys    keyspace.Space
	log     *zap.Logger
	changed *redis.Script // records a change
	changes *redis.Script // reads the changes since a revision
	// checkURL checks the URL of every session written; see WithURLCheck.
	checkURL func(string) error

	// afterRead, when set by a test, runs inside Pause and Resume between
	// the read and the write, to provoke a conflict.
	afterRead func()
}

// Option configures a Store.
type Option func(*Store)

// WithLogger sets the logger for failed publishes and, through Loader,
// malformed sessions; default zap.NewNop().
func WithLogger(l *zap.Logger) Option {
	return func(s *Store) {
		if l != nil {
			s.log = l
		}
	}
}

// NewStore returns a Store over client (a *redis.Client, *redis.ClusterClient
// or a Sentinel-backed client) for the keys of keys. It validates keys and
// does not touch Redis.
func NewStore(client redis.UniversalClient, keys keyspace.Space, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("session: new store: nil client")
	}
	if err := keys.Validate(); err != nil {
		return nil, fmt.Errorf("session: new store: %w", err)
	}
	s := &Store{client: client, keys: keys, log: zap.NewNop(), changed: redis.NewScript(lua.SessionChanged),
		changes: redis.NewScript(lua.SessionChanges), checkURL: HTTPURL}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Keys is the key space the store works in.
func (s *Store) Keys() keyspace.Space { return s.keys }

// Put validates sess (Session.Validate and the URL check, see
// WithURLCheck) and creates or replaces it (unknown fields of a stored
// value are not kept), then bumps the revision and announces the change.
func (s *Store) Put(ctx context.Context, sess Session) error {
	if err := s.validate(sess); err != nil {
		return fmt.Errorf("put %.64q: %w", sess.ID, err)
	}
	b, err := Encode(sess)
	if err != nil {
		return fmt.Errorf("put %.64q: %w", sess.ID, err)
	}
	// SET and SADD may go to different cluster slots, so no MULTI; the
	// revision is bumped only after both are acknowledged.
	var sadd *redis.IntCmd
	_, err = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.keys.Session(sess.ID), b, 0)
		sadd = p.SAdd(ctx, s.keys.SessionBucketOf(sess.ID), sess.ID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("put %s: %w", sess.ID, err)
	}
	return s.announce(ctx, "put", sess.ID, sadd.Val())
}

// PutMany validates every session (as Put does), then creates or replaces them all in
// pipelines of 1000 and records the change once (one revision, one
// announcement without ids): the bulk form of Put, for imports. Nothing is
// written when one session is invalid, and nothing at all (no revision
// bump) for no sessions. If a pipeline fails midway, the change of the
// sessions already written is still recorded (with a fresh context bounded
// by recordTimeout when ctx is done), so that a retry which finds them
// written still leaves the workers told.
func (s *Store) PutMany(ctx context.Context, sessions []Session) error {
	if len(sessions) == 0 {
		return nil
	}
	values := make([][]byte, len(sessions))
	for i, sess := range sessions {
		if err := s.validate(sess); err != nil {
			return fmt.Errorf("put many: %.64q: %w", sess.ID, err)
		}
		b, err := Encode(sess)
		if err != nil {
			return fmt.Errorf("put many: %.64q: %w", sess.ID, err)
		}
		values[i] = b
	}
	added := make(map[int]int64) // bucket -> ids added
	var werr error
	for lo := 0; lo < len(sessions) && werr == nil; lo += batch {
		hi := min(lo+batch, len(sessions))
		sadd := make([]*redis.IntCmd, hi-lo)
		_, werr = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < hi; i++ {
				id := sessions[i].ID
				p.Set(ctx, s.keys.Session(id), values[i], 0)
				sadd[i-lo] = p.SAdd(ctx, s.keys.SessionBucketOf(id), id)
			}
			return nil
		})
		for i := lo; i < hi; i++ {
			// A failed pipeline may have written some of its sessions:
			// mark their buckets changed all the same.
			added[keyspace.BucketOf(sessions[i].ID)] += sadd[i-lo].Val()
		}
	}
	if werr != nil {
		rctx, cancel := recordContext(ctx)
		defer cancel()
		if err := s.record(rctx, "put many", "", bucketArgs(added)); err != nil {
			return fmt.Errorf("put many: %w (and %w)", werr, err)
		}
		return fmt.Errorf("put many: %w", werr)
	}
	return s.record(ctx, "put many", "", bucketArgs(added))
}

// DeleteMany removes the sessions ids and their index entries in pipelines
// of 1000 and records the change once: the bulk form of Delete, for
// pruning. It returns the number of ids that had a key or an index entry;
// ids that had neither are not an error. Any non-empty id is accepted, as
// by Delete. Nothing is recorded for no ids. A failure midway is recorded
// as by PutMany.
func (s *Store) DeleteMany(ctx context.Context, ids []string) (int, error) {
	for _, id := range ids {
		if id == "" {
			return 0, fmt.Errorf("delete many: %w", keyspace.ValidateID(id))
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	removed := make(map[int]int64) // bucket -> ids removed
	deleted := 0
	var werr error
	for lo := 0; lo < len(ids) && werr == nil; lo += batch {
		hi := min(lo+batch, len(ids))
		del := make([]*redis.IntCmd, hi-lo)
		srem := make([]*redis.IntCmd, hi-lo)
		_, werr = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < hi; i++ {
				del[i-lo] = p.Del(ctx, s.keys.Session(ids[i]))
				srem[i-lo] = p.SRem(ctx, s.keys.SessionBucketOf(ids[i]), ids[i])
			}
			return nil
		})
		for i := lo; i < hi; i++ {
			removed[keyspace.BucketOf(ids[i])] -= srem[i-lo].Val()
			if del[i-lo].Val() > 0 || srem[i-lo].Val() > 0 {
				deleted++
			}
		}
	}
	if werr != nil {
		rctx, cancel := recordContext(ctx)
		defer cancel()
		if err := s.record(rctx, "delete many", "", bucketArgs(removed)); err != nil {
			return deleted, fmt.Errorf("delete many: %w (and %w)", werr, err)
		}
		return deleted, fmt.Errorf("delete many: %w", werr)
	}
	return deleted, s.record(ctx, "delete many", "", bucketArgs(removed))
}

// recordTimeout bounds the recording of a bulk write that failed midway
// when the caller's context is done.
const recordTimeout = 5 * time.Second

// recordContext is ctx, or when ctx is done a fresh context bounded by
// recordTimeout that keeps ctx's values.
func recordContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
}

// bucketArgs turns bucket -> size change into the arguments of record.
func bucketArgs(changes map[int]int64) []any {
	args := make([]any, 0, 2*len(changes))
	for b, n := range changes {
		args = append(args, b, n)
	}
	return args
}

// Get returns the session id. It returns an error wrapping ErrNotFound when
// the key is missing and one wrapping ErrMalformed when its value is invalid.
// Get does not consult the index.
func (s *Store) Get(ctx context.Context, id string) (Session, error) {
	if err := keyspace.ValidateID(id); err != nil {
		return Session{}, fmt.Errorf("get: %w", err)
	}
	got, err := s.fetch(ctx, []string{id})
	if err != nil {
		return Session{}, fmt.Errorf("get %s: %w", id, err)
	}
	f := got[0]
	switch {
	case f.missing:
		return Session{}, fmt.Errorf("get %s: %w", id, ErrNotFound)
	case f.err != nil:
		return Session{}, fmt.Errorf("get %s: %w", id, f.err)
	}
	sess, err := Decode(id, f.raw)
	if err != nil {
		return Session{}, fmt.Errorf("get %s: %w", id, err)
	}
	return sess, nil
}

// Delete removes the session id and its index entry, then bumps the
// revision and announces the change. It returns an error wrapping
// ErrNotFound when neither existed (the revision is bumped anyway, so that
// retrying a Delete whose bump failed still announces it). Any non-empty id
// is accepted, so that an invalid id found in the index can be removed.
func (s *Store) Delete(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("delete: %w", keyspace.ValidateID(id))
	}
	var del, srem *redis.IntCmd
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		del = p.Del(ctx, s.keys.Session(id))
		srem = p.SRem(ctx, s.keys.SessionBucketOf(id), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete %.64q: %w", id, err)
	}
	if err := s.announce(ctx, "delete", id, -srem.Val()); err != nil {
		return err
	}
	if del.Val() == 0 && srem.Val() == 0 {
		return fmt.Errorf("delete %.64q: %w", id, ErrNotFound)
	}
	return nil
}

// Pause marks the session id paused, keeping the rest of its stored value,
// then bumps the revision and announces the change. It returns an error
// wrapping ErrNotFound or ErrMalformed if the session is missing or invalid.
func (s *Store) Pause(ctx context.Context, id string) error {
	return s.setPaused(ctx, "pause", id, true)
}

// Resume clears the paused mark of the session id, like Pause.
func (s *Store) Resume(ctx context.Context, id string) error {
	return s.setPaused(ctx, "resume", id, false)
}

func (s *Store) setPaused(ctx context.Context, op, id string, paused bool) error {
	if err := keyspace.ValidateID(id); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	key := s.keys.Session(id)
	txf := func(tx *redis.Tx) error {
		got, err := s.fetchOne(ctx, tx, key)
		if err != nil {
			return err
		}
		switch {
		case got.missing:
			return ErrNotFound
		case got.err != nil:
			return got.err
		}
		sess, err := Decode(id, got.raw)
		if err != nil {
			return err
		}
		if sess.Paused == paused {
			return nil
		}
		if s.afterRead != nil {
			s.afterRead()
		}
		out, err := withPaused(id, got.raw, paused)
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, key, out, 0)
			return nil
		})
		return err
	}
	var err error
	for range maxWatchRetries {
		err = s.client.Watch(ctx, txf, key)
		if !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, id, err)
	}
	return s.announce(ctx, op, id, 0)
}

// withPaused returns raw with its "paused" field set (or removed, as Put
// encodes false) and every other field kept.
func withPaused(id string, raw []byte, paused bool) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, jsonReason(err))
	}
	for k := range m {
		// encoding/json matches field names case-insensitively.
		if strings.EqualFold(k, "paused") {
			delete(m, k)
		}
	}
	if paused {
		m["paused"] = json.RawMessage("true")
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if _, err := Decode(id, out); err != nil {
		return nil, err
	}
	return out, nil
}

// announce bumps the revision, records it as the last change of the id's
// bucket and adds added to the bucket's size (after the data writes were
// acknowledged), then publishes the
// change; a failed publish is only logged, since workers also poll the
// revision.
func (s *Store) announce(ctx context.Context, op, id string, added int64) error {
	return s.record(ctx, op, id, []any{keyspace.BucketOf(id), added})
}

// record is announce for several buckets: args are pairs of a bucket and
// the number of ids added to it (negative when removed); id names the one
// session changed, "" for many.
func (s *Store) record(ctx context.Context, op, id string, args []any) error {
	keys := []string{s.keys.SessionRev(), s.keys.SessionChanges(), s.keys.SessionSizes()}
	if err := s.changed.Run(ctx, s.client, keys, args...).Err(); err != nil {
		return fmt.Errorf("%s %.64q: bump revision: %w", op, id, err)
	}
	if err := s.client.Publish(ctx, s.keys.Events(), eventFor(id)).Err(); err != nil {
		s.log.Warn("announce session change", zap.String("op", op), zap.String("session", id), zap.Error(err))
	}
	return nil
}

// eventFor is the message published on keyspace.Space.Events after a
// write: a nodes.Event of type EventSessions, naming id when it is valid.
func eventFor(id string) string {
	e := nodes.Event{Type: nodes.EventSessions}
	if keyspace.ValidateID(id) == nil {
		e.Sessions = []string{id}
	}
	return e.Encode()
}
