package session

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
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
	require.Equal(t, int64(5), snap.Rev-counterStartedAt(t, s))
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

	// The change record, read by the script the workers run each round. A
	// reader that saw a revision from before the counter started must
	// reread everything.
	_, _, reset, err := s.Changes(ctx, 0)
	require.NoError(t, err)
	require.True(t, reset, "the counter started after revision 0")
	start := counterStartedAt(t, s)
	changed, rev, reset, err := s.Changes(ctx, start)
	require.NoError(t, err)
	require.False(t, reset)
	require.Equal(t, start+6, rev)
	sizes := map[int]int{}
	for _, ch := range changed {
		sizes[ch.Bucket] += ch.Size
	}
	require.Len(t, changed, len(sizes))
	wantSizes := map[int]int{}
	for id, n := range map[string]int{"a": 1, "b": 1, "c": 0} {
		wantSizes[keyspace.BucketOf(id)] += n
	}
	require.Equal(t, wantSizes, sizes)
	none, same, _, err := s.Changes(ctx, rev)
	require.NoError(t, err)
	require.Empty(t, none)
	require.Equal(t, rev, same)
}
