package session

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pollworker/pollworker/keyspace"
)

// day is the load of a session polled every second (sess), in polls per day.
const day = 86400

func TestChangesNameTheChangedBuckets(t *testing.T) {
	m, _, s := newMini(t)
	ctx := ctxT(t)

	got, r0, reset, err := s.Changes(ctx, 0)
	require.NoError(t, err)
	require.False(t, reset)
	require.Empty(t, got)
	require.Zero(t, r0)

	require.NoError(t, s.Put(ctx, sess("a")))
	require.NoError(t, s.Put(ctx, sess("b")))
	require.NoError(t, s.Put(ctx, sess("b"))) // a replacement: same size
	// The first write started the counter (at the server's clock): a
	// reader that had seen revision 0 rereads everything.
	_, _, reset, err = s.Changes(ctx, r0)
	require.NoError(t, err)
	require.True(t, reset, "the counter started after revision 0")
	r0 = counterStartedAt(t, s)
	got, r1, reset, err := s.Changes(ctx, r0)
	require.NoError(t, err)
	require.False(t, reset)
	require.ElementsMatch(t, []BucketSize{{keyspace.BucketOf("a"), 1, day, true, ""}, {keyspace.BucketOf("b"), 1, day, true, ""}}, got)
	r, err := s.Rev(ctx)
	require.NoError(t, err)
	require.Equal(t, r, r1)
	require.Equal(t, r0+3, r1, "three writes since the counter started")
	r, sizes, err := s.Sizes(ctx)
	require.NoError(t, err)
	require.Equal(t, r1, r)
	require.Equal(t, 1, sizes[keyspace.BucketOf("a")])
	require.Equal(t, 2, sizes[keyspace.BucketOf("a")]+sizes[keyspace.BucketOf("b")]-boolInt(keyspace.BucketOf("a") == keyspace.BucketOf("b")))

	// Nothing new: same revision, no bucket.
	got, same, _, err := s.Changes(ctx, r1)
	require.NoError(t, err)
	require.Empty(t, got)
	require.Equal(t, r1, same)

	// Pause, Resume and Delete are changes of the id's bucket too; a
	// paused session weighs nothing.
	for _, tc := range []struct {
		op         func() error
		size, load int
	}{
		{func() error { return s.Pause(ctx, "a") }, 1, 0},
		{func() error { return s.Resume(ctx, "a") }, 1, day},
		{func() error { return s.Delete(ctx, "a") }, 0, 0},
		{func() error { return s.PutMany(ctx, []Session{sess("a"), sess("a")}) }, 1, day},
	} {
		require.NoError(t, tc.op())
		got, r2, _, err := s.Changes(ctx, r1)
		require.NoError(t, err)
		require.Equal(t, []BucketSize{{keyspace.BucketOf("a"), tc.size, tc.load, true, ""}}, got)
		require.Greater(t, r2, r1)
		r1 = r2
	}

	// The record is lost (Redis restarted empty): the caller must reread.
	m.FlushAll()
	_, r3, reset, err := s.Changes(ctx, r1)
	require.NoError(t, err)
	require.True(t, reset)
	require.Zero(t, r3)

	// Written again, the counter starts afresh above every revision
	// counted before: never back at r1 with the writes since unread.
	require.NoError(t, s.Put(ctx, sess("a")))
	_, r4, reset, err := s.Changes(ctx, r1)
	require.NoError(t, err)
	require.True(t, reset, "the counter started again after r1")
	require.Greater(t, r4, r1)
}

func TestBucketIDsAndFetch(t *testing.T) {
	_, c, s := newMini(t)
	ctx := ctxT(t)
	ids := seed(t, c, 50)
	require.NoError(t, c.SAdd(ctx, keys.SessionBucketOf("bad id*"), "bad id*").Err())
	require.NoError(t, c.SAdd(ctx, keys.SessionBucketOf("gone"), "gone").Err())

	buckets := map[int]bool{}
	for _, id := range append(ids, "bad id*", "gone") {
		buckets[keyspace.BucketOf(id)] = true
	}
	var list []int
	for b := range buckets {
		list = append(list, b)
	}
	got, bad, err := s.BucketIDs(ctx, list)
	require.NoError(t, err)
	require.Empty(t, bad)
	require.Len(t, got, len(list))
	var all []string
	for i, in := range got {
		for _, id := range in {
			require.Equal(t, list[i], keyspace.BucketOf(id), id)
		}
		all = append(all, in...)
	}
	require.ElementsMatch(t, append(ids, "bad id*", "gone"), all)

	sessions, problems, err := s.Fetch(ctx, all)
	require.NoError(t, err)
	require.Len(t, sessions, len(ids))
	require.Len(t, problems, 1)
	require.Equal(t, "bad id*", problems[0].ID)
	require.ErrorIs(t, problems[0].Err, ErrMalformed)
}

func TestLoaderFetchLogsEachProblemOnce(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	_, c, s := newMini(t, WithLogger(zap.New(core)))
	ctx := ctxT(t)
	l := NewLoader(s)
	require.NoError(t, c.Set(ctx, keys.Session("x"), "{", 0).Err())
	for range 3 {
		_, problems, err := l.Fetch(ctx, []string{"x"})
		require.NoError(t, err)
		require.Len(t, problems, 1)
	}
	require.Equal(t, 1, logs.Len())
	require.Equal(t, 1, l.Logged())

	// Fixed, then broken again: logged again.
	require.NoError(t, s.Put(ctx, sess("x")))
	_, problems, err := l.Fetch(ctx, []string{"x"})
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, c.Set(ctx, keys.Session("x"), "{", 0).Err())
	_, _, err = l.Fetch(ctx, []string{"x"})
	require.NoError(t, err)
	require.Equal(t, 2, logs.Len())
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
