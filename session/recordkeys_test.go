package session

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

// TestWriteRefusedWhileTheChangeRecordIsUnusable: with a key of the change
// record of the wrong type, a write is refused before its data lands,
// naming the key (before, "rm" deleted the session and failed to tell the
// workers, which polled it on, and said "nothing changed"); once the key
// is repaired, writes go through.
func TestWriteRefusedWhileTheChangeRecordIsUnusable(t *testing.T) {
	keys := keyspace.Space{}
	for _, key := range []string{keys.SessionRev(), keys.SessionChanges(), keys.SessionSizes(), keys.SessionLoads()} {
		t.Run(key, func(t *testing.T) {
			mr := miniredis.RunT(t)
			client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			t.Cleanup(func() { _ = client.Close() })
			ctx := context.Background()
			setup, err := NewStore(client, keys)
			require.NoError(t, err)
			def := Session{ID: "api-1", URL: "http://127.0.0.1:1/a", Interval: Duration(time.Second)}
			require.NoError(t, setup.Put(ctx, def))

			require.NoError(t, client.Del(ctx, key).Err())
			_, err = mr.SAdd(key, "x") // a set: the wrong type for every key of the record
			require.NoError(t, err)
			s, err := NewStore(client, keys) // a CLI command: a new store
			require.NoError(t, err)
			for name, write := range map[string]func() error{
				"put": func() error {
					return s.Put(ctx, Session{ID: "api-2", URL: "http://127.0.0.1:1/b", Interval: Duration(time.Second)})
				},
				"pause":  func() error { return s.Pause(ctx, def.ID) },
				"delete": func() error { return s.Delete(ctx, def.ID) },
			} {
				err := write()
				require.ErrorIs(t, err, ErrRecordUnusable, name)
				require.ErrorContains(t, err, key, name)
			}
			got, err := s.Get(ctx, def.ID)
			require.NoError(t, err, "deleted behind the workers' back")
			require.False(t, got.Paused, "paused behind the workers' back")
			_, err = s.Get(ctx, "api-2")
			require.ErrorIs(t, err, ErrNotFound)

			require.NoError(t, client.Del(ctx, key).Err())
			require.NoError(t, s.Pause(ctx, def.ID), "the record repaired (deleted): writes go through")
		})
	}
}

// TestRecordWritesAllOrNothing: a record that meets a key of the wrong
// type (gone bad after the store's check) writes none of its parts, and
// the write says that its data landed unrecorded; the next write checks
// the record again.
func TestRecordWritesAllOrNothing(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	keys := keyspace.Space{}
	s, err := NewStore(client, keys)
	require.NoError(t, err)
	def := Session{ID: "api-1", URL: "http://127.0.0.1:1/a", Interval: Duration(time.Second)}
	require.NoError(t, s.Put(ctx, def))
	rev, err := client.Get(ctx, keys.SessionRev()).Result()
	require.NoError(t, err)
	changes, err := client.ZCard(ctx, keys.SessionChanges()).Result()
	require.NoError(t, err)

	require.NoError(t, client.Del(ctx, keys.SessionSizes()).Err())
	_, err = mr.SAdd(keys.SessionSizes(), "x")
	require.NoError(t, err)
	err = s.Put(ctx, Session{ID: "api-2", URL: "http://127.0.0.1:1/b", Interval: Duration(time.Second)})
	require.ErrorIs(t, err, ErrNotRecorded)
	require.ErrorContains(t, err, keys.SessionSizes())
	after, err := client.Get(ctx, keys.SessionRev()).Result()
	require.NoError(t, err)
	require.Equal(t, rev, after, "the revision was bumped for a record not written")
	n, err := client.ZCard(ctx, keys.SessionChanges()).Result()
	require.NoError(t, err)
	require.Equal(t, changes, n, "half a record")

	err = s.Put(ctx, Session{ID: "api-3", URL: "http://127.0.0.1:1/c", Interval: Duration(time.Second)})
	require.ErrorIs(t, err, ErrRecordUnusable, "the next write checks the record again")
}
