package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrRecordUnusable is wrapped by the error of a write refused, before
// anything was written, because a key of the change record (the
// revision, the changes, the bucket sizes or loads) has the wrong type:
// the workers could not be told of the write, so a session deleted or
// paused would be polled on.
var ErrRecordUnusable = errors.New("session: the change record cannot be written")

// ErrNotRecorded is wrapped by the error of a write whose definitions were
// written but whose change could not be recorded (Redis failed between
// the two, and kept failing through the retries of writeRecord; or a key
// of the record went bad since the check): the workers do not see it, so
// a session deleted
// or paused is polled on, one added is not polled. RebuildLoads (the CLI's
// "sessions reweigh") records every bucket as changed, and the workers
// then reread them all.
var ErrNotRecorded = errors.New(`written, but the change was not recorded, so the workers do not see it: run "pollworker sessions reweigh" (Store.RebuildLoads) once Redis answers`)

// recordKeyTypes are the types of the change record's keys, in the order
// of recordKeys (and of session_changed.lua's KEYS).
var recordKeyTypes = [4]string{"string", "zset", "hash", "hash"}

// recordKeys are the keys of the change record: the revision, the
// changes, the bucket sizes and the loads.
func (s *Store) recordKeys() []string {
	return []string{s.keys.SessionRev(), s.keys.SessionChanges(), s.keys.SessionSizes(), s.keys.SessionLoads()}
}

// checkRecord returns an error wrapping ErrRecordUnusable, naming the key,
// when a key of the change record has the wrong type (one pipeline of
// TYPE; missing keys are fine), and Redis's error when the record script
// may not run (an ACL without +evalsha: NOPERM), which it calls in its
// checking mode, writing nothing.
func (s *Store) checkRecord(ctx context.Context) error {
	if err := s.checkRecordTypes(ctx); err != nil {
		return err
	}
	if err := s.changed.Run(ctx, s.client, s.recordKeys(), "?").Err(); err != nil {
		return fmt.Errorf("session: the change record cannot be written: %w", err)
	}
	return nil
}

// checkRecordTypes is checkRecord's check of the key types.
func (s *Store) checkRecordTypes(ctx context.Context) error {
	keys := s.recordKeys()
	cmds := make([]*redis.StatusCmd, len(keys))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Type(ctx, k)
		}
		return nil
	})
	if err != nil {
		if redis.HasErrorPrefix(err, "NOPERM") {
			return nil // an ACL without +type: the script's own guard still refuses
		}
		return fmt.Errorf("session: read the change record's key types: %w", err)
	}
	for i, cmd := range cmds {
		if t := cmd.Val(); t != "none" && t != recordKeyTypes[i] {
			return recordKeyError(keys[i], t, recordKeyTypes[i])
		}
	}
	return nil
}

// recordKeyError is ErrRecordUnusable for key of type got, not want.
func recordKeyError(key, got, want string) error {
	return fmt.Errorf("%w: key %s is a %s, not a %s; pollworker never deletes it: rename or delete it (the workers then reread every bucket; \"pollworker sessions reweigh\" recounts the loads)",
		ErrRecordUnusable, key, got, want)
}

// Retries of a change record whose data landed: for up to recordRetryFor
// after the first failure, each attempt bounded by recordAttempt, on a
// context of its own (the caller's may be what ran out).
const (
	recordRetryFor = 5 * time.Second
	recordAttempt  = time.Second
	recordBackoff  = 50 * time.Millisecond
)

// writeRecord writes the change record of one write (session_changed.lua
// with args), once: the write gets a random name, and the script marks it
// done (keyspace.Space.SessionRecorded), so that an attempt whose reply
// was lost is not counted again. The data has landed already, and a
// record not written leaves it unseen by the workers, so a failure that
// may pass (a timeout, a lost connection, Redis loading, out of memory;
// the caller's deadline too) is retried on a context of its own for up to
// recordRetryFor; a key of the wrong type or a refused command is not.
func (s *Store) writeRecord(ctx context.Context, args []any) error {
	var name [8]byte
	_, _ = rand.Read(name[:]) // never fails: crypto/rand.Read crashes the program instead
	keys := append(s.recordKeys(), s.keys.SessionRecorded(hex.EncodeToString(name[:])))
	err := s.changed.Run(ctx, s.client, keys, args...).Err()
	deadline := time.Now().Add(recordRetryFor)
	for wait := recordBackoff; err != nil && retryable(err) && time.Now().Before(deadline); wait = min(2*wait, time.Second) {
		t := time.NewTimer(wait)
		<-t.C // not the caller's ctx: it may be what ended the first attempt
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordAttempt)
		err = s.changed.Run(actx, s.client, keys, args...).Err()
		cancel()
	}
	return err
}

// retryable reports whether a failed record may succeed if tried again:
// not when Redis refused the script itself (a key of the wrong type, an
// ACL, a script error).
func retryable(err error) bool {
	msg := err.Error()
	for _, final := range []string{"WRONGTYPE", "NOPERM", "ERR ", "NOSCRIPT"} {
		if strings.Contains(msg, final) {
			return false
		}
	}
	return true
}
