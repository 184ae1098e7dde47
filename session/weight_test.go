package session

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/scripts/lua"
)

func TestPollsPerDay(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{MaxInterval, 1},
		{time.Hour, 24},
		{time.Second, 86400},
		{MinInterval, 8_640_000},
		{7 * time.Hour, 4},              // 3.43 rounds up
		{24*time.Hour - time.Second, 2}, // just under a day: 2, never 0
		{0, 0},
	} {
		require.Equal(t, tc.want, PollsPerDay(tc.d), tc.d)
	}
	require.Zero(t, Session{Interval: Duration(time.Second), Paused: true}.Load())
}

// recount is the loads every bucket should have: the sum of the loads of
// the definitions stored.
func recount(t *testing.T, s *Store) []int {
	t.Helper()
	snap, err := s.Load(ctxT(t))
	require.NoError(t, err)
	out := make([]int, keyspace.SessionBuckets)
	for _, sess := range snap.Sessions {
		out[keyspace.BucketOf(sess.ID)] += sess.Load()
	}
	return out
}

func requireLoads(t *testing.T, s *Store, what string) Weights {
	t.Helper()
	w, err := s.Weights(ctxT(t))
	require.NoError(t, err)
	require.True(t, w.Complete, what)
	require.Equal(t, recount(t, s), w.Loads, what)
	return w
}

func every(id string, d time.Duration) Session {
	return Session{ID: id, URL: "https://example.com/" + id, Interval: Duration(d)}
}

// TestLoadsKeptByEveryWrite checks against a real redis-server (SET … GET
// and GETDEL are what keep the loads) that the loads hash equals the loads
// counted from the definitions after each kind of write, and that Changes
// carries them.
func TestLoadsKeptByEveryWrite(t *testing.T) {
	c := redistest.Start(t).Client(t)
	s := newStore(t, c)
	ctx := ctxT(t)

	require.NoError(t, s.Put(ctx, every("a", time.Second)))
	w := requireLoads(t, s, "add")
	require.Equal(t, 86400, w.Loads[keyspace.BucketOf("a")])

	require.NoError(t, s.Put(ctx, every("a", time.Hour)))
	w = requireLoads(t, s, "interval changed")
	require.Equal(t, 24, w.Loads[keyspace.BucketOf("a")])
	got, _, _, err := s.Changes(ctx, w.Rev-1)
	require.NoError(t, err)
	require.Equal(t, []BucketSize{{keyspace.BucketOf("a"), 1, 24, true, ""}}, got)

	var many []Session
	for i := range 300 {
		many = append(many, every(fmt.Sprintf("s%d", i), time.Duration(1+i%7)*time.Second))
	}
	require.NoError(t, s.PutMany(ctx, many))
	requireLoads(t, s, "put many")
	for i := range many {
		many[i].Interval = Duration(time.Minute)
	}
	require.NoError(t, s.PutMany(ctx, many[:150])) // an apply that changes intervals
	requireLoads(t, s, "put many, intervals changed")

	require.NoError(t, s.Pause(ctx, "s3"))
	requireLoads(t, s, "pause")
	require.NoError(t, s.Resume(ctx, "s3"))
	requireLoads(t, s, "resume")

	require.NoError(t, s.Delete(ctx, "a"))
	requireLoads(t, s, "delete")
	n, err := s.DeleteMany(ctx, []string{"s1", "s2", "s200", "nosuch"})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	requireLoads(t, s, "delete many")

	// A key of another type is replaced by Put and weighs nothing before.
	require.NoError(t, c.HSet(ctx, keys.Session("h"), "x", "y").Err())
	require.NoError(t, s.Put(ctx, every("h", time.Second)))
	requireLoads(t, s, "put over a hash")
	// A write behind the store's back is not counted: the delete takes off
	// only what the value it found weighs (malformed: 0), so h's load stays
	// in its bucket until a rebuild.
	require.NoError(t, c.Set(ctx, keys.Session("h"), "not json", 0).Err())
	require.NoError(t, s.Delete(ctx, "h"))
	w, err = s.Weights(ctx)
	require.NoError(t, err)
	want := recount(t, s)
	require.Equal(t, 86400, w.Loads[keyspace.BucketOf("h")]-want[keyspace.BucketOf("h")])
	_, err = s.RebuildLoads(ctx)
	require.NoError(t, err)
	requireLoads(t, s, "rebuilt after a foreign write")
}

// TestLoadsExactUnderRacingWriters: writers that race on the same ids
// leave exactly the loads of the final values, since each write takes off
// the value it replaced (SET … GET), not one it read earlier.
func TestLoadsExactUnderRacingWriters(t *testing.T) {
	c := redistest.Start(t).Client(t)
	s := newStore(t, c)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				id := fmt.Sprintf("r%d", i%10)
				var err error
				switch (i + w) % 5 {
				case 0:
					err = s.Delete(ctx, id)
					if err != nil && !isNotFound(err) {
						t.Error(err)
					}
					continue
				case 1:
					err = s.PutMany(ctx, []Session{every(id, time.Duration(1+w)*time.Second)})
				case 2:
					err = s.Pause(ctx, id)
					if isNotFound(err) {
						err = nil
					}
				default:
					err = s.Put(ctx, every(id, time.Duration(1+i%4+w)*time.Second))
				}
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	requireLoads(t, s, "after racing writers")
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// TestLoadsOfAnOldIndex: an index written before loads were kept has no
// complete loads: Plannable falls back to the sizes until RebuildLoads
// counts the definitions.
func TestLoadsOfAnOldIndex(t *testing.T) {
	c := redistest.Start(t).Client(t)
	s := newStore(t, c)
	ctx := ctxT(t)
	writeOld(t, c, every("x", time.Second), every("y", time.Hour))

	w, err := s.Weights(ctx)
	require.NoError(t, err)
	require.False(t, w.Complete)
	require.Equal(t, w.Sizes, w.Plannable(), "no loads: plan by counts")

	// New writes keep the loads up, but they stay incomplete.
	require.NoError(t, s.Put(ctx, every("z", time.Second)))
	got, _, _, err := s.Changes(ctx, 0)
	require.NoError(t, err)
	require.NotEmpty(t, got)
	require.False(t, got[0].Complete)

	total, err := s.RebuildLoads(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(86400+24+86400), total)
	w = requireLoads(t, s, "rebuilt")
	require.Equal(t, w.Loads, w.Plannable())
	got, _, _, err = s.Changes(ctx, w.Rev-1)
	require.NoError(t, err)
	require.NotEmpty(t, got, "the rebuild marks the buckets changed")
	require.True(t, got[0].Complete)

	// The rebuild's write refuses a count older than the last write: the
	// revision moved, nothing is written.
	keys := []string{keys.SessionRev(), keys.SessionChanges(), keys.SessionLoads()}
	n, err := redis.NewScript(lua.SessionLoads).Run(ctx, c, keys, w.Rev-1, "0", 999).Int64()
	require.NoError(t, err)
	require.Equal(t, int64(-1), n)
	requireLoads(t, s, "unchanged after a refused rebuild")
}

// writeOld writes sessions as a store before loads did: SET, SADD, and the
// old change record (revision, change, size; no loads).
func writeOld(t *testing.T, c *redis.Client, ss ...Session) {
	t.Helper()
	ctx := ctxT(t)
	for _, sess := range ss {
		b, err := Encode(sess)
		require.NoError(t, err)
		require.NoError(t, c.Set(ctx, keys.Session(sess.ID), b, 0).Err())
		require.NoError(t, c.SAdd(ctx, keys.SessionBucketOf(sess.ID), sess.ID).Err())
		rev, err := c.Incr(ctx, keys.SessionRev()).Result()
		require.NoError(t, err)
		bucket := keyspace.BucketOf(sess.ID)
		require.NoError(t, c.ZAdd(ctx, keys.SessionChanges(), redis.Z{Score: float64(rev), Member: bucket}).Err())
		require.NoError(t, c.HIncrBy(ctx, keys.SessionSizes(), fmt.Sprint(bucket), 1).Err())
	}
}

// TestSelectorUnits: a session with a selector weighs in its selector's
// unit of its bucket ("b|zone=eu"), counted from its value: its size is 1
// while active, and a change of selector moves size and load; a rebuild
// counts the same.
func TestSelectorUnits(t *testing.T) {
	c := redistest.Start(t).Client(t)
	s := newStore(t, c)
	ctx := ctxT(t)
	b := keyspace.BucketOf("z")
	eu := every("z", time.Second)
	eu.Selector = "zone=eu"
	require.NoError(t, s.Put(ctx, eu))
	w, err := s.Weights(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, w.Sizes[b], "the bucket's size counts every id")
	require.Zero(t, w.Loads[b], "the bucket's own unit does not weigh it")
	require.Equal(t, 1, w.Spaces["zone=eu"].Sizes[b])
	require.Equal(t, 86400, w.Spaces["zone=eu"].Loads[b])
	got, _, _, err := s.Changes(ctx, w.Rev-1)
	require.NoError(t, err)
	require.ElementsMatch(t, []BucketSize{{b, 1, 0, true, ""}, {b, 1, 86400, true, "zone=eu"}}, got)

	us := every("z", time.Hour)
	us.Selector = "zone=us,tier=1" // canonical: tier=1,zone=us
	require.NoError(t, s.Put(ctx, us))
	require.NoError(t, s.Pause(ctx, "z"))
	require.NoError(t, s.Resume(ctx, "z"))
	w, err = s.Weights(ctx)
	require.NoError(t, err)
	require.Zero(t, w.Spaces["zone=eu"].Sizes[b])
	require.Zero(t, w.Spaces["zone=eu"].Loads[b])
	require.Equal(t, 1, w.Spaces["tier=1,zone=us"].Sizes[b])
	require.Equal(t, 24, w.Spaces["tier=1,zone=us"].Loads[b])

	require.NoError(t, s.Pause(ctx, "z"))
	w, err = s.Weights(ctx)
	require.NoError(t, err)
	require.Zero(t, w.Spaces["tier=1,zone=us"].Sizes[b], "paused: not active")

	// A rebuild counts the same units.
	require.NoError(t, s.Resume(ctx, "z"))
	before, err := s.Weights(ctx)
	require.NoError(t, err)
	require.NoError(t, c.HDel(ctx, keys.SessionSizes(), UnitOf(b, "tier=1,zone=us")).Err())
	require.NoError(t, c.HSet(ctx, keys.SessionLoads(), UnitOf(b, "zone=eu"), 5).Err())
	_, err = s.RebuildLoads(ctx)
	require.NoError(t, err)
	after, err := s.Weights(ctx)
	require.NoError(t, err)
	require.Equal(t, before.Spaces["tier=1,zone=us"], after.Spaces["tier=1,zone=us"])
	require.Nil(t, after.Spaces["zone=eu"], "a stale unit is cleared")

	bad := every("y", time.Second)
	bad.Selector = "zone"
	require.ErrorIs(t, s.Put(ctx, bad), ErrMalformed)
}

// TestRebuildLoadsRepairsTheSizes: sizes left wrong (a Cluster master that
// lost its data: an index set gone, its size still counted; or a size lost
// while its set stayed) are rewritten from the index sets by RebuildLoads
// (sessions reweigh), so check's index-sizes passes again.
func TestRebuildLoadsRepairsTheSizes(t *testing.T) {
	c := redistest.Start(t).Client(t)
	s := newStore(t, c)
	ctx := ctxT(t)
	require.NoError(t, s.PutMany(ctx, []Session{every("x", time.Second), every("y", time.Hour), every("z", time.Minute)}))
	want, err := s.Weights(ctx)
	require.NoError(t, err)

	bx, by := keyspace.BucketOf("x"), keyspace.BucketOf("y")
	require.NoError(t, c.HIncrBy(ctx, keys.SessionSizes(), strconv.Itoa(bx), 5).Err())
	require.NoError(t, c.HDel(ctx, keys.SessionSizes(), strconv.Itoa(by)).Err())
	require.NoError(t, c.HSet(ctx, keys.SessionSizes(), "77", "3").Err()) // a bucket with no set
	broken, err := s.Weights(ctx)
	require.NoError(t, err)
	require.NotEqual(t, want.Sizes, broken.Sizes)

	_, err = s.RebuildLoads(ctx)
	require.NoError(t, err)
	got, err := s.Weights(ctx)
	require.NoError(t, err)
	require.Equal(t, want.Sizes, got.Sizes)
	for b := range keyspace.SessionBuckets {
		n, err := c.SCard(ctx, keys.SessionBucket(b)).Result()
		require.NoError(t, err)
		require.EqualValues(t, n, got.Sizes[b], "bucket %d", b)
	}
}
