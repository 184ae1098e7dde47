package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/scripts/lua"
)

// highWater reads slot 0's token high-water mark (0 when missing).
func (r *realEnv) highWater(t *testing.T) int64 {
	t.Helper()
	v, err := r.rdb.Get(context.Background(), realKeys.EpochTokens(0)).Int64()
	if err == redis.Nil {
		return 0
	}
	require.NoError(t, err)
	return v
}

func TestRealTokenHighWaterMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("tokens continue from a mark ahead of the clock (a clock stepped back)", func(t *testing.T) {
		r := startReal(t)
		ahead := time.Now().Add(time.Hour).UnixMicro()
		require.NoError(t, r.rdb.Set(ctx, realKeys.EpochTokens(0), ahead, 0).Err())
		m := r.manager(t, "a")
		res := m.Acquire(ctx, []string{"s1", "s2"})
		require.Equal(t, ahead+1, res[0].Lease.Token())
		require.Equal(t, ahead+2, res[1].Lease.Token(), "unique in the slot")
		require.Equal(t, ahead+2, r.highWater(t))
		require.Zero(t, r.fence(t, "s1"), "no fencing record is written for a session without one")
		l3 := acquireOne(t, m, "s3").Lease
		require.Equal(t, ahead+3, l3.Token(), "a later call continues from the mark")
	})

	t.Run("a release records the token; the next acquisition updates it", func(t *testing.T) {
		r := startReal(t)
		a, b := r.manager(t, "a", useRealClock), r.manager(t, "b", useRealClock)
		la := acquireOne(t, a, "s").Lease
		require.NotNil(t, la)
		require.Zero(t, r.fence(t, "s"))
		require.NoError(t, a.Release(ctx, la))
		require.Equal(t, la.Token(), r.fence(t, "s"), "the first release creates the record with the released token")
		lb := acquireOne(t, b, "s").Lease
		require.NotNil(t, lb)
		require.Greater(t, lb.Token(), la.Token())
		_, ok := lb.HandoffGap()
		require.True(t, ok, "the release's mark counts for the successor")
		require.Equal(t, lb.Token(), r.fence(t, "s"), "a session with a record has every later token written into it")
		require.NoError(t, b.Release(ctx, lb))
		lc := acquireOne(t, a, "s").Lease
		require.Greater(t, lc.Token(), lb.Token())
		require.NoError(t, a.Release(ctx, lc))
	})

	tests := []struct {
		name  string
		plant func(context.Context, *redis.Client, string) error
	}{
		{"wrong type", func(ctx context.Context, c *redis.Client, k string) error { return c.RPush(ctx, k, "x").Err() }},
		{"not a decimal integer", func(ctx context.Context, c *redis.Client, k string) error { return c.Set(ctx, k, "12ab", 0).Err() }},
		{"at 2^53-1", func(ctx context.Context, c *redis.Client, k string) error {
			return c.Set(ctx, k, "9007199254740991", 0).Err()
		}},
		{"a year ahead of the clock, below 2^53-1", func(ctx context.Context, c *redis.Client, k string) error {
			return c.Set(ctx, k, "9007199254740988", 0).Err()
		}},
	}
	for _, tt := range tests {
		t.Run("an unusable mark is reported and overwritten: "+tt.name, func(t *testing.T) {
			r := startReal(t)
			require.NoError(t, tt.plant(ctx, r.rdb, realKeys.EpochTokens(0)))
			m := r.manager(t, "a")
			res := acquireOne(t, m, "s")
			require.NoError(t, res.Err)
			require.NotNil(t, res.Lease, "the sessions of the slot are acquired as usual")
			requireMinted(t, res.Lease.Token())
			require.Equal(t, 1, m.MarkerRepairs())
			require.Equal(t, res.Lease.Token(), r.highWater(t))
			l2 := acquireOne(t, m, "s2").Lease
			require.Greater(t, l2.Token(), res.Lease.Token())
			require.Equal(t, 1, m.MarkerRepairs(), "repaired once")
		})
	}
}

// TestRealTokensAcrossVersions runs the acquire and release scripts of the
// version before the high-water mark (every token written into the
// session's record: testdata/*_records.lua) beside today's on one session,
// as a rolling upgrade does, in a seeded random order of acquisitions,
// releases and expiries, with and without the mark lost: every token is
// above the one before.
func TestRealTokensAcrossVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := startReal(t)
	read := func(name string) *redis.Script {
		src, err := os.ReadFile("testdata/" + name)
		require.NoError(t, err)
		return redis.NewScript(string(src))
	}
	oldAcquire, oldRelease := read("acquire_records.lua"), read("release_records.lua")
	newAcquire, newRelease := redis.NewScript(lua.Acquire), redis.NewScript(lua.Release)
	rng := rand.New(rand.NewPCG(20261127, 1))
	sessions := []string{"s0", "s1", "s2"}
	held := map[string]struct {
		owner string
		token int64
	}{}
	last := map[string]int64{}
	for step := range 400 {
		s := sessions[rng.IntN(len(sessions))]
		old := rng.IntN(2) == 0
		h, holding := held[s]
		switch {
		case !holding:
			owner := fmt.Sprintf("w#%d", step)
			keys := []string{realKeys.Lease(s), realKeys.Fencing(s), realKeys.Epoch(0)}
			script := oldAcquire
			if !old {
				script = newAcquire
				keys = append(keys, realKeys.EpochTokens(0))
			}
			args := []any{10000, 0, "", owner}
			if !old {
				args = append(args, 1) // the owner value is for one session
			}
			raw, err := script.Run(ctx, r.rdb, keys, args...).Slice()
			require.NoError(t, err)
			token := raw[0].(int64)
			require.Greater(t, token, last[s], "step %d (old version: %v): %s's token went back", step, old, s)
			last[s] = token
			held[s] = struct {
				owner string
				token int64
			}{owner, token}
		case rng.IntN(3) == 0: // the lease expires
			require.NoError(t, r.rdb.Del(ctx, realKeys.Lease(s)).Err())
			delete(held, s)
		default:
			script := oldRelease
			if !old {
				script = newRelease
			}
			n, err := script.Run(ctx, r.rdb, []string{realKeys.Lease(s), realKeys.Fencing(s)}, markTTL, h.owner, -1, h.token).Int64Slice()
			require.NoError(t, err)
			require.Equal(t, []int64{1}, n)
			delete(held, s)
		}
		if rng.IntN(50) == 0 { // the mark is lost alone (evicted)
			require.NoError(t, r.rdb.Del(ctx, realKeys.EpochTokens(0)).Err())
		}
	}
	for _, s := range sessions {
		require.NotZero(t, last[s], "%s was acquired", s)
	}
}

// TestRealForeignHighWaterMarkNeverRunsTokensBack: a high-water mark
// written by something else just below 2^53-1, while sessions without a
// fencing record are held (their tokens are in their leases and the mark
// only), is read as unusable before any token is minted from it. Before,
// the slot minted tokens up to 2^53-1, then read its own mark (2^53-1) as
// unusable and fell back to the clock: the next tokens of those sessions
// went back, and sessions whose records had kept 2^53-1 were never
// acquired again.
func TestRealForeignHighWaterMarkNeverRunsTokensBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := startReal(t)
	a, b := r.manager(t, "a", useRealClock), r.manager(t, "b", useRealClock)
	held := a.Acquire(ctx, []string{"s1", "s2", "s3"})
	var top int64
	for _, res := range held {
		require.NotNil(t, res.Lease)
		top = max(top, res.Lease.Token())
	}
	const foreign = 1<<53 - 4
	require.NoError(t, r.rdb.Set(ctx, realKeys.EpochTokens(0), int64(foreign), 0).Err())
	for _, s := range []string{"s4", "s5", "s6"} {
		l := acquireOne(t, b, s).Lease
		require.NotNil(t, l, "the slot's sessions are still acquired")
		require.Greater(t, l.Token(), top, "above every token minted before")
		require.Less(t, l.Token(), int64(foreign), "not from the foreign mark")
		top = l.Token()
	}
	require.Equal(t, 1, b.MarkerRepairs(), "reported once, as an unusable mark")
	require.Equal(t, top, r.highWater(t), "overwritten")
	// The sessions held before, expired or released, keep going up.
	require.NoError(t, a.ReleaseAll(ctx))
	for _, res := range held {
		l := acquireOne(t, b, res.Lease.Session()).Lease
		require.NotNil(t, l)
		require.Greater(t, l.Token(), res.Lease.Token())
	}
}
