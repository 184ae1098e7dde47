package session

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
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

// failFirstRecord fails the first change-record script call: after Redis
// ran it (a lost reply), or before it was sent (the caller's deadline).
type failFirstRecord struct {
	afterRun bool
	failed   atomic.Bool
}

func (h *failFirstRecord) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failFirstRecord) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *failFirstRecord) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isRecord(cmd) || h.failed.Swap(true) {
			return next(ctx, cmd)
		}
		if h.afterRun {
			_ = next(ctx, cmd)
			cmd.SetErr(errors.New("read tcp: i/o timeout"))
			return cmd.Err()
		}
		cmd.SetErr(context.DeadlineExceeded)
		return cmd.Err()
	}
}

// isRecord reports whether cmd runs session_changed.lua (the only script
// with the revision counter as its first key and a fifth key).
func isRecord(cmd redis.Cmder) bool {
	args := cmd.Args()
	name := strings.ToLower(fmt.Sprint(args[0]))
	return (name == "evalsha" || name == "eval") && len(args) > 7 && fmt.Sprint(args[2]) == "5" &&
		strings.HasSuffix(fmt.Sprint(args[3]), ":{sessions}:rev")
}

// TestRecordRetriedOnce: a change record whose first attempt failed is
// written by a retry, on a context of its own, and counted once even when
// the failed attempt had run (its reply lost): the write succeeds and the
// bucket's size is 1, not 2.
func TestRecordRetriedOnce(t *testing.T) {
	for _, afterRun := range []bool{false, true} {
		t.Run(fmt.Sprintf("ran=%v", afterRun), func(t *testing.T) {
			mr := miniredis.RunT(t)
			client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			t.Cleanup(func() { _ = client.Close() })
			hook := &failFirstRecord{afterRun: afterRun}
			client.AddHook(hook)
			ctx := context.Background()
			keys := keyspace.Space{}
			s, err := NewStore(client, keys)
			require.NoError(t, err)
			def := Session{ID: "api-1", URL: "http://127.0.0.1:1/a", Interval: Duration(time.Second)}
			require.NoError(t, s.Put(ctx, def), "the record was not retried")
			require.True(t, hook.failed.Load(), "the hook failed no record: the test proves nothing")
			size, err := client.HGet(ctx, keys.SessionSizes(), strconv.Itoa(keyspace.BucketOf(def.ID))).Int()
			require.NoError(t, err)
			require.Equal(t, 1, size, "the record was counted twice")
			rev, err := client.Get(ctx, keys.SessionRev()).Int64()
			require.NoError(t, err)
			start, err := client.ZScore(ctx, keys.SessionChanges(), "!start").Result()
			require.NoError(t, err)
			require.Equal(t, int64(start)+1, rev, "the revision was bumped twice")
		})
	}
}
