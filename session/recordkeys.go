package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ErrRecordUnusable is wrapped by the error of a write refused, before
// anything was written, because a key of the change record (the
// revision, the changes, the bucket sizes or loads) has the wrong type:
// the workers could not be told of the write, so a session deleted or
// paused would be polled on.
var ErrRecordUnusable = errors.New("session: the change record cannot be written")

// ErrNotRecorded is wrapped by the error of a write whose definitions were
// written but whose change could not be recorded (Redis failed, or the
// caller's deadline passed, between the two; or a key of the record went
// bad since the check): the workers do not see it, so a session deleted
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
// TYPE; missing keys are fine).
func (s *Store) checkRecord(ctx context.Context) error {
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
