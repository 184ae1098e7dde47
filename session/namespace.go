package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
)

// ErrNamespaceOwned is returned when the session prefix of a keyspace
// holds the sessions of another key prefix (keyspace.Space.SessionOwner):
// by ClaimNamespace and CheckNamespace, and by a Store's writes (Put,
// PutMany, Delete, DeleteMany, Pause, Resume), which claim the session
// prefix before their first write and write nothing when it is another's.
var ErrNamespaceOwned = errors.New("session prefix taken by another key prefix")

// ClaimNamespace records that keys' session prefix holds the sessions of
// keys' key prefix, unless a key prefix is recorded already, and returns
// an error wrapping ErrNamespaceOwned when that is another one. A worker
// claims it at start (pollworker run, init), so that a second fleet given
// its own --key-prefix but the default --session-prefix is refused
// instead of rewriting and removing the first fleet's definitions.
func ClaimNamespace(ctx context.Context, client redis.Cmdable, keys keyspace.Space) error {
	set, err := client.SetNX(ctx, keys.SessionOwner(), keys.KeyNamespace(), 0).Result()
	if err != nil {
		return fmt.Errorf("session: claim the session prefix: %w", err)
	}
	if set {
		return nil
	}
	return CheckNamespace(ctx, client, keys)
}

// claim makes sure, once per Store and before it first writes a
// definition, that its session prefix holds its key prefix's sessions
// (ClaimNamespace; a client without the right to write the record, an
// ACL, only checks it). Put, PutMany, Delete, DeleteMany, Pause and Resume
// return its error wrapping ErrNamespaceOwned, having written nothing.
//
// It also checks that the change record can be written (checkRecord)
// and that the change can be announced (nodes.CheckChannel), so that a
// write is refused before its data lands rather than written unseen by
// the workers; a record that fails later makes the next write check
// again.
func (s *Store) claim(ctx context.Context) error {
	if s.claimed.Load() {
		return nil
	}
	err := ClaimNamespace(ctx, s.client, s.keys)
	if redis.HasErrorPrefix(err, "NOPERM") {
		err = CheckNamespace(ctx, s.client, s.keys)
	}
	if err != nil {
		return err
	}
	if err := s.checkRecord(ctx); err != nil {
		return err
	}
	// Holders hear of a write on the events channel: one this client may
	// not publish would reach them only at their next full round.
	if err := nodes.CheckChannel(ctx, s.client, s.keys, false); err != nil {
		return fmt.Errorf("session: the change cannot be announced to the workers: %w", err)
	}
	s.claimed.Store(true)
	return nil
}

// CheckNamespace returns an error wrapping ErrNamespaceOwned when keys'
// session prefix is recorded as holding another key prefix's sessions,
// and nil when it holds keys' or none is recorded. A recorded value of
// the wrong type is an error naming the key.
func CheckNamespace(ctx context.Context, client redis.Cmdable, keys keyspace.Space) error {
	key := keys.SessionOwner()
	owner, err := client.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return fmt.Errorf("%w: %s is not a string (it names the key prefix whose sessions --session-prefix %q holds); delete it, and the next worker records its own",
			ErrNamespaceOwned, key, keys.SessionNamespace())
	case err != nil:
		return fmt.Errorf("session: read %s: %w", key, err)
	case owner != keys.KeyNamespace():
		return fmt.Errorf("%w: --session-prefix %q holds the sessions of --key-prefix %q (key %s), not of %q: give each fleet its own --session-prefix",
			ErrNamespaceOwned, keys.SessionNamespace(), owner, key, keys.KeyNamespace())
	}
	return nil
}
