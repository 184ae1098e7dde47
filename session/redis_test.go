package session

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

// TestRealRedis runs the store against a real redis-server, whose WATCH,
// GETRANGE and WRONGTYPE replies miniredis only imitates.
func TestRealRedis(t *testing.T) {
	c := redistest.Start(t).Client(t)
	s := newStore(t, c)
	ctx := ctxT(t)

	for _, id := range []string{"b", "a", "c"} {
		require.NoError(t, s.Put(ctx, sess(id)))
	}
	require.NoError(t, s.Pause(ctx, "b"))
	require.NoError(t, s.Delete(ctx, "c"))
	want := putMalformed(t, c)

	snap, err := s.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(5), snap.Rev)
	require.Equal(t, []string{"a", "b"}, ids(snap.Sessions))
	require.True(t, snap.Sessions[1].Paused)
	require.Len(t, snap.Malformed, len(want))
	for _, p := range snap.Malformed {
		require.ErrorIs(t, p.Err, ErrMalformed, p.ID)
		require.ErrorContains(t, p.Err, want[p.ID], p.ID)
	}
	n, err := c.Exists(ctx, keys.Session("hash"), keys.Session("enormous"), keys.Session("badjson")).Result()
	require.NoError(t, err)
	require.Equal(t, int64(3), n)

	require.NoError(t, s.Resume(ctx, "b"))
	got, err := s.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, sess("b"), got)
	require.ErrorIs(t, s.Pause(ctx, "hash"), ErrMalformed)
	_, err = s.Get(ctx, "c")
	require.ErrorIs(t, err, ErrNotFound)
}
