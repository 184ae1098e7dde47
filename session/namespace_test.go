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

func TestClaimNamespace(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	poll, b := keyspace.Space{}, keyspace.Space{Prefix: "b"}
	own := keyspace.Space{Prefix: "b", SessionPrefix: "b-session"}

	require.NoError(t, CheckNamespace(ctx, client, b), "nothing recorded: no owner to differ from")
	require.NoError(t, ClaimNamespace(ctx, client, poll))
	require.NoError(t, ClaimNamespace(ctx, client, poll), "claimed again by its owner")
	require.NoError(t, CheckNamespace(ctx, client, poll))
	got, err := mr.Get("session:{owner}")
	require.NoError(t, err)
	require.Equal(t, "poll", got)

	for _, fn := range []func(context.Context, redis.Cmdable, keyspace.Space) error{ClaimNamespace, CheckNamespace} {
		err := fn(ctx, client, b)
		require.ErrorIs(t, err, ErrNamespaceOwned)
		require.ErrorContains(t, err, `--session-prefix "session" holds the sessions of --key-prefix "poll" (key session:{owner}), not of "b"`)
	}
	require.NoError(t, ClaimNamespace(ctx, client, own), "its own session prefix")

	// A key of the wrong type is named, and left alone.
	mr.Del("session:{owner}")
	mr.HSet("session:{owner}", "f", "v")
	err = ClaimNamespace(ctx, client, poll)
	require.ErrorIs(t, err, ErrNamespaceOwned)
	require.ErrorContains(t, err, "session:{owner} is not a string")
	require.Equal(t, "hash", mr.Type("session:{owner}"))
}

// TestStoreWritesOnlyItsOwnNamespace: a Store whose session prefix holds
// another key prefix's sessions writes, rewrites and removes nothing
// there; one with its own session prefix works beside it.
func TestStoreWritesOnlyItsOwnNamespace(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	a, err := NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	def := Session{ID: "api-1", URL: "http://127.0.0.1:1/a", Interval: Duration(time.Second)}
	require.NoError(t, a.Put(ctx, def))

	b, err := NewStore(client, keyspace.Space{Prefix: "b"})
	require.NoError(t, err)
	evil := def
	evil.URL = "http://127.0.0.1:1/evil"
	require.ErrorIs(t, b.Put(ctx, evil), ErrNamespaceOwned)
	require.ErrorIs(t, b.PutMany(ctx, []Session{evil}), ErrNamespaceOwned)
	require.ErrorIs(t, b.Pause(ctx, def.ID), ErrNamespaceOwned)
	require.ErrorIs(t, b.Resume(ctx, def.ID), ErrNamespaceOwned)
	require.ErrorIs(t, b.Delete(ctx, def.ID), ErrNamespaceOwned)
	_, err = b.DeleteMany(ctx, []string{def.ID})
	require.ErrorIs(t, err, ErrNamespaceOwned)
	got, err := a.Get(ctx, def.ID)
	require.NoError(t, err)
	require.Equal(t, def.URL, got.URL, "a's definition untouched")
	require.False(t, got.Paused)
	require.False(t, mr.Exists(keyspace.Space{Prefix: "b"}.SessionBucketOf(def.ID)), "nothing in b's index")

	own, err := NewStore(client, keyspace.Space{Prefix: "b", SessionPrefix: "b-session"})
	require.NoError(t, err)
	require.NoError(t, own.Put(ctx, evil))
	got, err = own.Get(ctx, def.ID)
	require.NoError(t, err)
	require.Equal(t, evil.URL, got.URL)
}
