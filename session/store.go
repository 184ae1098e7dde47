package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
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
	// keyspaceRule: the keyspace's URLRule replaces checkURL; see
	// WithKeyspaceURLRule.
	keyspaceRule bool
	// claimed: the session prefix was found to hold this key prefix's
	// sessions (claim), so definitions may be written.
	claimed atomic.Bool

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
	checkURL, err := s.writeCheck(ctx)
	if err != nil {
		return fmt.Errorf("put %.64q: %w", sess.ID, err)
	}
	if err := validate(sess, checkURL); err != nil {
		return fmt.Errorf("put %.64q: %w", sess.ID, err)
	}
	b, err := Encode(sess)
	if err != nil {
		return fmt.Errorf("put %.64q: %w", sess.ID, err)
	}
	if err := s.claim(ctx); err != nil {
		return fmt.Errorf("put %.64q: %w", sess.ID, err)
	}
	// SET and SADD may go to different cluster slots, so no MULTI; the
	// revision is bumped only after both are acknowledged. SET … GET
	// returns the value replaced, whose load the change record takes off.
	var set *redis.StatusCmd
	var sadd *redis.IntCmd
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		set = p.SetArgs(ctx, s.keys.Session(sess.ID), b, redis.SetArgs{Get: true})
		sadd = p.SAdd(ctx, s.keys.SessionBucketOf(sess.ID), sess.ID)
		return nil
	})
	old, present, err := s.replaced(ctx, set, sess.ID, b)
	if err == nil {
		err = sadd.Err()
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", sess.ID, err)
	}
	if cutsSlots(old, present, sess) {
		s.cutSlots(ctx, []string{sess.ID})
	}
	cs := make(changeSet)
	cs.replaced(sess.ID, old, present, b, true, sadd.Val())
	return s.record(ctx, "put", sess.ID, cs.args())
}

// replaced reads the reply of a SET … GET of session id to value: the
// value it replaced and whether there was one. A key of another Redis type
// (which SET … GET refuses) is overwritten with a plain SET, as Put always
// did; it weighed nothing.
func (s *Store) replaced(ctx context.Context, set *redis.StatusCmd, id string, value []byte) (old []byte, present bool, err error) {
	v, err := set.Result()
	switch {
	case err == nil:
		return []byte(v), true, nil
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return nil, false, s.client.Set(ctx, s.keys.Session(id), value, 0).Err()
	}
	return nil, false, err
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
	checkURL, err := s.writeCheck(ctx)
	if err != nil {
		return fmt.Errorf("put many: %w", err)
	}
	values := make([][]byte, len(sessions))
	for i, sess := range sessions {
		if err := validate(sess, checkURL); err != nil {
			return fmt.Errorf("put many: %.64q: %w", sess.ID, err)
		}
		b, err := Encode(sess)
		if err != nil {
			return fmt.Errorf("put many: %.64q: %w", sess.ID, err)
		}
		values[i] = b
	}
	if err := s.claim(ctx); err != nil {
		return fmt.Errorf("put many: %w", err)
	}
	cs := make(changeSet)
	var werr error
	var cut []string // sessions whose recorded slots the write cuts (cutsSlots)
	for lo := 0; lo < len(sessions) && werr == nil; lo += PipelineLen {
		hi := min(lo+PipelineLen, len(sessions))
		set := make([]*redis.StatusCmd, hi-lo)
		sadd := make([]*redis.IntCmd, hi-lo)
		_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < hi; i++ {
				id := sessions[i].ID
				set[i-lo] = p.SetArgs(ctx, s.keys.Session(id), values[i], redis.SetArgs{Get: true})
				sadd[i-lo] = p.SAdd(ctx, s.keys.SessionBucketOf(id), id)
			}
			return nil
		})
		for i := lo; i < hi; i++ {
			// A failed pipeline may have written some of its sessions:
			// mark their buckets changed all the same.
			err := s.putReply(ctx, cs, &cut, sessions[i], values[i], set[i-lo], sadd[i-lo])
			if err != nil && werr == nil {
				werr = err
			}
		}
	}
	s.cutSlots(ctx, cut)
	return s.recordBulk(ctx, "put many", werr, cs)
}

// putReply reads the replies of the SET … GET and SADD that wrote sess
// (encoded as value): its change goes into cs (a value not written weighs
// nothing: no change), and its id into cut when the write cuts its
// recorded slots (cutsSlots).
func (s *Store) putReply(ctx context.Context, cs changeSet, cut *[]string, sess Session, value []byte, set *redis.StatusCmd, sadd *redis.IntCmd) error {
	old, present, err := s.replaced(ctx, set, sess.ID, value)
	written := err == nil
	if written && cutsSlots(old, present, sess) {
		*cut = append(*cut, sess.ID)
	}
	if err == nil {
		err = sadd.Err()
	}
	cs.replaced(sess.ID, old, present, value, written, sadd.Val())
	return err
}

// dropHandoff queues the deletion of a session's handoff mark, and the cut
// of its recorded slots (slotcut.go): the field
// of its fencing record (the token stays: tokens never go back), and the
// mark of the layout before the records. The mark keeps the removed
// session's schedule (its backoff, say) for a successor: a session added
// again under this id starts afresh. Best effort (a record of the wrong
// type fails alone): a successor bounds what it keeps of a mark anyway
// (lease.Lease.NextPollWithin).
func (s *Store) dropHandoff(ctx context.Context, p redis.Pipeliner, id string) {
	p.HDel(ctx, s.keys.Fencing(id), keyspace.FieldHandoff)
	p.Del(ctx, s.keys.Released(id))
	s.queueSlotCut(ctx, p, id) // slots due while it is removed are not owed (slotcut.go)
}

// DeleteMany removes the sessions ids, their index entries and handoff
// marks in pipelines
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
	if err := s.claim(ctx); err != nil {
		return 0, fmt.Errorf("delete many: %w", err)
	}
	cs := make(changeSet)
	deleted := 0
	var werr error
	for lo := 0; lo < len(ids) && werr == nil; lo += PipelineLen {
		hi := min(lo+PipelineLen, len(ids))
		del := make([]*redis.StringCmd, hi-lo)
		srem := make([]*redis.IntCmd, hi-lo)
		_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := lo; i < hi; i++ {
				del[i-lo] = p.GetDel(ctx, s.keys.Session(ids[i]))
				srem[i-lo] = p.SRem(ctx, s.keys.SessionBucketOf(ids[i]), ids[i])
				s.dropHandoff(ctx, p, ids[i]) // see Delete
			}
			return nil
		})
		for i := lo; i < hi; i++ {
			old, had, err := s.deleted(ctx, del[i-lo], ids[i])
			if err == nil {
				err = srem[i-lo].Err()
			}
			if err != nil && werr == nil {
				werr = err
			}
			cs.replaced(ids[i], old, had, nil, false, -srem[i-lo].Val())
			if had || srem[i-lo].Val() > 0 {
				deleted++
			}
		}
	}
	return deleted, s.recordBulk(ctx, "delete many", werr, cs)
}

// recordBulk records the change cs of a bulk write. When the write failed
// midway (werr), what it wrote is still recorded, with a fresh context
// (recordContext) if ctx is done, and werr is returned.
func (s *Store) recordBulk(ctx context.Context, op string, werr error, cs changeSet) error {
	if werr == nil {
		return s.record(ctx, op, "", cs.args())
	}
	rctx, cancel := recordContext(ctx)
	defer cancel()
	if err := s.record(rctx, op, "", cs.args()); err != nil {
		return fmt.Errorf("%s: %w (and %w)", op, werr, err)
	}
	return fmt.Errorf("%s: %w", op, werr)
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

// deleted reads the reply of a GETDEL of session id: the value deleted and
// whether there was one. A key of another Redis type (which GETDEL refuses)
// is deleted with DEL; it weighed nothing.
func (s *Store) deleted(ctx context.Context, del *redis.StringCmd, id string) (old []byte, had bool, err error) {
	v, err := del.Bytes()
	switch {
	case err == nil:
		return v, true, nil
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		n, err := s.client.Del(ctx, s.keys.Session(id)).Result()
		return nil, n > 0, err
	}
	return nil, false, err
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

// Delete removes the session id, its index entry and its handoff mark
// (keyspace.Space.Released), then bumps the
// revision and announces the change. It returns an error wrapping
// ErrNotFound when neither existed (the revision is bumped anyway, so that
// retrying a Delete whose bump failed still announces it). Any non-empty id
// is accepted, so that an invalid id found in the index can be removed.
func (s *Store) Delete(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("delete: %w", keyspace.ValidateID(id))
	}
	if err := s.claim(ctx); err != nil {
		return fmt.Errorf("delete %.64q: %w", id, err)
	}
	var del *redis.StringCmd
	var srem *redis.IntCmd
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		del = p.GetDel(ctx, s.keys.Session(id))
		srem = p.SRem(ctx, s.keys.SessionBucketOf(id), id)
		s.dropHandoff(ctx, p, id)
		return nil
	})
	old, had, err := s.deleted(ctx, del, id)
	if err == nil {
		err = srem.Err()
	}
	if err != nil {
		return fmt.Errorf("delete %.64q: %w", id, err)
	}
	cs := make(changeSet)
	cs.replaced(id, old, had, nil, false, -srem.Val())
	if err := s.record(ctx, "delete", id, cs.args()); err != nil {
		return err
	}
	if !had && srem.Val() == 0 {
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
	if err := s.claim(ctx); err != nil {
		return fmt.Errorf("%s %.64q: %w", op, id, err)
	}
	key := s.keys.Session(id)
	var before, after []byte // the value replaced and its replacement
	txf := func(tx *redis.Tx) (err error) {
		before, after, err = s.pausedTx(ctx, tx, id, paused)
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
	cs := make(changeSet)
	if after != nil {
		s.cutSlots(ctx, []string{id}) // neither the slots due while paused nor those before (slotcut.go)
		cs.replaced(id, before, true, after, true, 0)
	} else {
		cs.add(Unit(keyspace.BucketOf(id)), 0, 0)
	}
	return s.record(ctx, op, id, cs.args())
}

// pausedTx sets the paused mark of session id inside the transaction tx
// (which watches its key). It returns the value replaced and its
// replacement, or two nils when the mark was already as asked.
func (s *Store) pausedTx(ctx context.Context, tx *redis.Tx, id string, paused bool) (before, after []byte, err error) {
	key := s.keys.Session(id)
	got, err := s.fetchOne(ctx, tx, key)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case got.missing:
		return nil, nil, ErrNotFound
	case got.err != nil:
		return nil, nil, got.err
	}
	sess, err := Decode(id, got.raw)
	if err != nil {
		// Confirm the value was malformed, not read while another
		// writer deleted and wrote it again: EXEC fails (and the
		// transaction is retried) if the key changed since WATCH.
		if _, xerr := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Ping(ctx)
			return nil
		}); xerr != nil {
			return nil, nil, xerr
		}
		return nil, nil, err
	}
	if sess.Paused == paused {
		return nil, nil, nil
	}
	if s.afterRead != nil {
		s.afterRead()
	}
	out, err := withPaused(id, got.raw, paused)
	if err != nil {
		return nil, nil, err
	}
	if _, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, out, 0)
		return nil
	}); err != nil {
		return nil, nil, err
	}
	return got.raw, out, nil
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

// record bumps the revision, records it as the last change of some
// placement units and adds their size and load changes (after the data
// writes were acknowledged), atomically (scripts/lua/session_changed.lua),
// then publishes the change; a failed publish is only logged, since workers
// also poll the revision. args are changeSet.args; id names the one session
// changed, "" for many.
func (s *Store) record(ctx context.Context, op, id string, args []any) error {
	if err := s.writeRecord(ctx, args); err != nil {
		s.claimed.Store(false) // check the record again before the next write
		return fmt.Errorf("%s %.64q: %w (%w)", op, id, ErrNotRecorded, err)
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
