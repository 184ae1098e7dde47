package lease

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pollworker/pollworker/internal/redisstats"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/scripts/lua"
)

// The tests in this file run against a real redis-server (see
// internal/redistest); they are skipped when none is installed, and fail
// under CI. Real time passes only where real expiry is the point, with TTLs
// of a few hundred milliseconds.

// live stands, in a wanted script reply, for a remaining TTL: more than 0 ms
// and at most the TTL the key was set with.
const live = -99

// minted stands, in a wanted script reply or fence, for a token minted from
// the Redis clock: microseconds since the epoch, within a minute of the
// test's clock.
const minted = -98

func requireMinted(t *testing.T, got int64, msgAndArgs ...any) {
	t.Helper()
	now := time.Now().UnixMicro()
	require.Greater(t, got, now-60_000_000, msgAndArgs...)
	require.Less(t, got, now+60_000_000, msgAndArgs...)
}

// requireReply compares a script reply with want, where live matches any
// remaining TTL in (0, maxTTL] ms.
func requireReply(t *testing.T, want []int64, maxTTL int64, got []int64) {
	t.Helper()
	require.Len(t, got, len(want), "reply %v", got)
	for i, w := range want {
		if w == live {
			require.Greater(t, got[i], int64(0), "reply %v [%d]", got, i)
			require.LessOrEqual(t, got[i], maxTTL, "reply %v [%d]", got, i)
			continue
		}
		if w == minted {
			requireMinted(t, got[i], "reply %v [%d]", got, i)
			continue
		}
		require.Equal(t, w, got[i], "reply %v [%d]", got, i)
	}
}

const scriptTTL = 5000 // ms, the TTL the script tests set

// seed prepares keys before a script call.
type seed struct {
	held    map[string]string // session -> owner value, set with scriptTTL
	forever map[string]string // session -> owner value, set without expiry
	fence   map[string]int64  // session -> counter value
}

func (r *realEnv) seed(t *testing.T, s seed) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, r.rdb.FlushAll(ctx).Err())
	for sess, o := range s.held {
		require.NoError(t, r.rdb.Set(ctx, realKeys.Lease(sess), o, scriptTTL*time.Millisecond).Err())
	}
	for sess, o := range s.forever {
		require.NoError(t, r.rdb.Set(ctx, realKeys.Lease(sess), o, 0).Err())
	}
	for sess, n := range s.fence {
		require.NoError(t, r.rdb.HSet(ctx, realKeys.Fencing(sess), keyspace.FieldToken, n).Err())
	}
}

// after is the state of one session's keys once a script has run.
type after struct {
	owner string // "" when the lease key is missing
	fence int64  // 0 when the counter is missing
	pttl  int64  // live, -1 (no expiry) or -2 (missing); live checks (0, ttl]
}

func (r *realEnv) requireAfter(t *testing.T, want map[string]after, ttl int64) {
	t.Helper()
	for sess, w := range want {
		require.Equal(t, w.owner, r.owner(t, sess), "owner of %s", sess)
		if w.fence == minted {
			requireMinted(t, r.fence(t, sess), "fence of %s", sess)
		} else {
			require.Equal(t, w.fence, r.fence(t, sess), "fence of %s", sess)
		}
		got := r.pttl(t, sess)
		if w.pttl == live {
			require.Greater(t, got, int64(0), "pttl of %s", sess)
			require.LessOrEqual(t, got, ttl, "pttl of %s", sess)
		} else {
			require.Equal(t, w.pttl, got, "pttl of %s", sess)
		}
	}
}

func TestRealAcquireScript(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	const ttl = 60000                                  // larger than scriptTTL: a fresh SET is told from a seeded key
	hourAhead := time.Now().Add(time.Hour).UnixMicro() // a record ahead of a clock stepped back
	tests := []struct {
		name     string
		seed     seed
		sessions []string
		owners   map[string]string
		want     []int64
		after    map[string]after
	}{
		{
			name:     "free key: token from the clock, PX set",
			sessions: []string{"s"},
			owners:   map[string]string{"s": "a#1"},
			want:     []int64{minted, 0, -1},
			after:    map[string]after{"s": {"a#1", minted, live}},
		},
		{
			name:     "free key with a counter from a plain INCR (an upgrade): the clock is above it",
			seed:     seed{fence: map[string]int64{"s": 41}},
			sessions: []string{"s"},
			owners:   map[string]string{"s": "a#1"},
			want:     []int64{minted, 0, -1},
			after:    map[string]after{"s": {"a#1", minted, live}},
		},
		{
			name:     "free key with a counter ahead of the clock (stepped back an hour): counter + 1",
			seed:     seed{fence: map[string]int64{"s": hourAhead}},
			sessions: []string{"s"},
			owners:   map[string]string{"s": "a#1"},
			want:     []int64{hourAhead + 1, 0, -1},
			after:    map[string]after{"s": {"a#1", hourAhead + 1, live}},
		},
		{
			name:     "same owner value again (retried request): same token, no INCR",
			seed:     seed{held: map[string]string{"s": "a#1"}, fence: map[string]int64{"s": 7}},
			sessions: []string{"s"},
			owners:   map[string]string{"s": "a#1"},
			want:     []int64{7, 0, -1},
			after:    map[string]after{"s": {"a#1", 7, live}},
		},
		{
			name:     "another owner: 0 and its pttl, nothing changed",
			seed:     seed{held: map[string]string{"s": "b#1"}, fence: map[string]int64{"s": 3}},
			sessions: []string{"s"},
			owners:   map[string]string{"s": "a#1"},
			want:     []int64{0, live, -1},
			after:    map[string]after{"s": {"b#1", 3, live}},
		},
		{
			name:     "another owner without expiry: pttl -1",
			seed:     seed{forever: map[string]string{"s": "b#1"}},
			sessions: []string{"s"},
			owners:   map[string]string{"s": "a#1"},
			want:     []int64{0, -1, -1},
			after:    map[string]after{"s": {"b#1", 0, -1}},
		},
		{
			name: "many sessions, mixed outcomes",
			seed: seed{
				held:  map[string]string{"other": "b#1", "mine": "a#3"},
				fence: map[string]int64{"other": 5, "mine": 9, "used": 100},
			},
			sessions: []string{"free", "other", "mine", "used"},
			owners:   map[string]string{"free": "a#1", "other": "a#2", "mine": "a#3", "used": "a#4"},
			want:     []int64{minted, 0, -1, 0, live, -1, 9, 0, -1, minted, 0, -1},
			after: map[string]after{
				"free":  {"a#1", minted, live},
				"other": {"b#1", 5, live},
				"mine":  {"a#3", 9, live},
				"used":  {"a#4", minted, live},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.seed(t, tt.seed)
			got, heldBy := runAcquire(t, r.rdb, ttl, tt.owners, tt.sessions...)
			requireReply(t, tt.want, scriptTTL, got)
			for i, s := range tt.sessions {
				want := ""
				if h, ok := tt.seed.held[s]; ok && h != tt.owners[s] {
					want = h
				}
				if h, ok := tt.seed.forever[s]; ok && h != tt.owners[s] {
					want = h
				}
				require.Equal(t, want, heldBy[i], "holder reported for %s", s)
			}
			r.requireAfter(t, tt.after, ttl)
		})
	}

	t.Run("fresh SET uses the given PX", func(t *testing.T) {
		r.seed(t, seed{})
		_, _ = runAcquire(t, r.rdb, ttl, map[string]string{"s": "a#1"}, "s")
		require.Greater(t, r.pttl(t, "s"), int64(scriptTTL), "fresh acquire sets PX ttl")
	})
}

func TestRealRenewScript(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	const ttl = 60000
	tests := []struct {
		name     string
		seed     seed
		sessions []string
		owners   map[string]string
		want     []int64          // positions (from 1) of the leases not renewed
		after    map[string]after // pttl live here means at most scriptTTL (not extended)
		extended []string         // sessions whose PTTL must now exceed scriptTTL
	}{
		{
			name:     "owner matches: PEXPIRE",
			seed:     seed{held: map[string]string{"s": "a#1"}, fence: map[string]int64{"s": 1}},
			sessions: []string{"s"},
			owners:   map[string]string{"s": "a#1"},
			want:     []int64{},
			extended: []string{"s"},
		},
		{
			name:     "another owner: untouched",
			seed:     seed{held: map[string]string{"s": "b#1"}, fence: map[string]int64{"s": 1}},
			sessions: []string{"s"},
			owners:   map[string]string{"s": "a#1"},
			want:     []int64{1},
			after:    map[string]after{"s": {"b#1", 1, live}},
		},
		{
			name:     "missing key: never created",
			sessions: []string{"s"},
			owners:   map[string]string{"s": "a#1"},
			want:     []int64{1},
			after:    map[string]after{"s": {"", 0, -2}},
		},
		{
			name: "many sessions, mixed outcomes",
			seed: seed{held: map[string]string{"m1": "a#1", "other": "b#1", "m2": "a#2"},
				forever: map[string]string{"other2": "b#2"}},
			sessions: []string{"m1", "other", "missing", "m2", "other2"},
			owners:   map[string]string{"m1": "a#1", "other": "a#9", "missing": "a#8", "m2": "a#2", "other2": "a#7"},
			want:     []int64{2, 3, 5},
			after: map[string]after{
				"other":   {"b#1", 0, live},
				"missing": {"", 0, -2},
				"other2":  {"b#2", 0, -1},
			},
			extended: []string{"m1", "m2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.seed(t, tt.seed)
			got := runRenew(t, r.rdb, ttl, tt.owners, tt.sessions...)
			requireReply(t, tt.want, 0, got)
			r.requireAfter(t, tt.after, scriptTTL)
			for _, s := range tt.extended {
				require.Greater(t, r.pttl(t, s), int64(scriptTTL), "pttl of %s", s)
				require.LessOrEqual(t, r.pttl(t, s), int64(ttl), "pttl of %s", s)
				require.Equal(t, tt.owners[s], r.owner(t, s))
			}
		})
	}
}

// renew.lua reads owner values with MGET a thousand keys at a time: a call
// of 2,500 leases spans three MGETs, and positions stay right across them.
func TestRealRenewScriptAcrossMGETChunks(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	const n = 2500
	owners := make(map[string]string, n)
	sessions := make([]string, n)
	pipe := r.rdb.Pipeline()
	var want []int64
	for i := range sessions {
		s := fmt.Sprintf("s%04d", i)
		sessions[i], owners[s] = s, fmt.Sprintf("a#%d", i)
		switch {
		case i%997 == 0: // missing
			want = append(want, int64(i+1))
		case i%1000 == 999 || i%1000 == 0: // another owner, at chunk edges
			pipe.Set(ctx, realKeys.Lease(s), "b#1", scriptTTL*time.Millisecond)
			want = append(want, int64(i+1))
		case i == n-1:
			pipe.Set(ctx, realKeys.Lease(s), "wrong", scriptTTL*time.Millisecond)
			want = append(want, int64(i+1))
		default:
			pipe.Set(ctx, realKeys.Lease(s), owners[s], scriptTTL*time.Millisecond)
		}
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	require.Equal(t, want, runRenew(t, r.rdb, 60000, owners, sessions...))
	require.Greater(t, r.pttl(t, "s0001"), int64(scriptTTL), "renewed")
	require.Greater(t, r.pttl(t, "s2498"), int64(scriptTTL), "renewed")
	require.LessOrEqual(t, r.pttl(t, "s0999"), int64(scriptTTL), "another owner's lease is not extended")
}

func TestRealReleaseScript(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	tests := []struct {
		name     string
		seed     seed
		sessions []string
		owners   map[string]string
		want     []int64
		after    map[string]after
	}{
		{
			name:     "owner matches: DEL, counter kept",
			seed:     seed{held: map[string]string{"s": "a#1"}, fence: map[string]int64{"s": 4}},
			sessions: []string{"s"},
			owners:   map[string]string{"s": "a#1"},
			want:     []int64{1},
			after:    map[string]after{"s": {"", 4, -2}},
		},
		{
			name:     "another owner: untouched",
			seed:     seed{held: map[string]string{"s": "b#1"}, fence: map[string]int64{"s": 4}},
			sessions: []string{"s"},
			owners:   map[string]string{"s": "a#1"},
			want:     []int64{0},
			after:    map[string]after{"s": {"b#1", 4, live}},
		},
		{
			name:     "missing key",
			sessions: []string{"s"},
			owners:   map[string]string{"s": "a#1"},
			want:     []int64{0},
			after:    map[string]after{"s": {"", 0, -2}},
		},
		{
			name: "many sessions, mixed outcomes",
			seed: seed{held: map[string]string{"m1": "a#1", "other": "b#1", "m2": "a#2"},
				forever: map[string]string{"mine-forever": "a#3"}},
			sessions: []string{"m1", "other", "missing", "m2", "mine-forever"},
			owners:   map[string]string{"m1": "a#1", "other": "a#9", "missing": "a#8", "m2": "a#2", "mine-forever": "a#3"},
			want:     []int64{1, 0, 0, 1, 1},
			after: map[string]after{
				"m1":           {"", 0, -2},
				"other":        {"b#1", 0, live},
				"missing":      {"", 0, -2},
				"m2":           {"", 0, -2},
				"mine-forever": {"", 0, -2},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.seed(t, tt.seed)
			now := r.rdb.Time(context.Background()).Val().UnixMilli()
			got := runRelease(t, r, r.rdb, tt.owners, tt.sessions...)
			requireReply(t, tt.want, 0, got)
			r.requireAfter(t, tt.after, scriptTTL)
			for i, s := range tt.sessions {
				at, pttl := r.mark(t, s)
				if got[i] == 0 {
					require.Equal(t, int64(-1), at, "no handoff mark for %s: not released", s)
					continue
				}
				require.GreaterOrEqual(t, at, now, "handoff mark of %s is the release time", s)
				require.Less(t, at, now+2000, "handoff mark of %s is the release time", s)
				require.Greater(t, pttl, int64(0), "handoff mark of %s expires", s)
				require.LessOrEqual(t, pttl, int64(markTTL), "handoff mark of %s lives ARGV[1] ms", s)
			}
		})
	}
}

func TestRealAcquireScriptHandoffMark(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	const ago = 1500 // ms between the seeded release and the acquisition
	// setMark leaves a mark of token 3 (the record's, seeded below)
	setMark := func(session, v string) {
		require.NoError(t, r.rdb.HSet(ctx, realKeys.Fencing(session), keyspace.FieldHandoff, v).Err())
	}
	released := func() string {
		now := r.rdb.Time(ctx).Val().UnixMilli()
		return fmt.Sprintf("3:%d:%d", now-ago, now+60000)
	}

	r.seed(t, seed{held: map[string]string{"other": "b#1", "mine": "a#3"},
		fence: map[string]int64{"free": 3, "other": 3, "mine": 3, "garbage": 3, "stale": 4}})
	for _, s := range []string{"free", "other", "mine", "stale"} {
		setMark(s, released())
	}
	setMark("garbage", "not a number")
	got, _ := runAcquire(t, r.rdb, 10000,
		map[string]string{"free": "a#1", "other": "a#2", "mine": "a#3", "garbage": "a#4", "none": "a#5", "stale": "a#6"},
		"free", "other", "mine", "garbage", "none", "stale")
	require.Len(t, got, 18)
	requireMinted(t, got[0])
	require.Zero(t, got[1])
	require.GreaterOrEqual(t, got[2], int64(ago), "gap since the release")
	require.Less(t, got[2], int64(ago+2000), "gap since the release")
	require.Equal(t, []int64{0, -1}, []int64{got[3], got[5]}, "held by another: no gap")
	require.Equal(t, []int64{3, 0, -1}, got[6:9], "a retry reports no gap")
	requireMinted(t, got[9])
	require.Equal(t, []int64{0, -1}, got[10:12], "a malformed mark is no gap")
	requireMinted(t, got[12])
	require.Equal(t, []int64{0, -1}, got[13:15], "no mark, no gap")
	requireMinted(t, got[15])
	require.Equal(t, []int64{0, -1}, got[16:18], "a mark of another token (a later acquisition's lease expired) is no gap")

	for s, wantMark := range map[string]bool{"free": false, "garbage": false, "other": true, "mine": true, "stale": false} {
		at, _ := r.mark(t, s)
		require.Equal(t, wantMark, at != -1, "mark of %s still counts: %v", s, wantMark)
	}
}

func TestRealInspectScript(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	r.seed(t, seed{held: map[string]string{"h": "a#1"}, forever: map[string]string{"f": "b#2"}})
	tests := []struct {
		name     string
		sessions []string
		want     []any // live stands for a remaining TTL in (0, scriptTTL]
	}{
		{"held with TTL", []string{"h"}, []any{"a#1", live, nil, int64(0), int64(-1)}},
		{"missing", []string{"m"}, []any{nil, int64(-2), nil, int64(0), int64(-1)}},
		{"no expiry", []string{"f"}, []any{"b#2", int64(-1), nil, int64(0), int64(-1)}},
		{"missing ones do not cut the reply short", []string{"m", "h", "m2", "f"},
			[]any{nil, int64(-2), nil, int64(0), int64(-1), "a#1", live, nil, int64(0), int64(-1),
				nil, int64(-2), nil, int64(0), int64(-1), "b#2", int64(-1), nil, int64(0), int64(-1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runInspect(t, r.rdb, tt.sessions...)
			require.Len(t, got, len(tt.want), "reply %v", got)
			for i, w := range tt.want {
				if w == live {
					ms, ok := got[i].(int64)
					require.True(t, ok, "reply %v [%d]", got, i)
					require.Greater(t, ms, int64(0))
					require.LessOrEqual(t, ms, int64(scriptTTL))
					continue
				}
				require.Equal(t, w, got[i], "reply %v [%d]", got, i)
			}
		})
	}

	t.Run("Inspect reads it as Holdings", func(t *testing.T) {
		hs, err := Inspect(context.Background(), r.rdb, realKeys, []string{"m", "h", "f"}, 2)
		require.NoError(t, err)
		require.Equal(t, Holding{Session: "m"}, hs[0])
		require.Equal(t, "a#1", hs[1].Owner)
		require.Greater(t, hs[1].Remaining, time.Duration(0))
		require.LessOrEqual(t, hs[1].Remaining, scriptTTL*time.Millisecond)
		require.Equal(t, Holding{Session: "f", Owner: "b#2", Remaining: -1}, hs[2], "no expiry reads as Remaining -1")
	})
}

func TestRealManagerSurvivesScriptFlush(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	m := r.manager(t, "a")
	ctx := context.Background()
	flush := func() { require.NoError(t, r.rdb.ScriptFlush(ctx).Err()) }
	requireCalls := func(wantPipelines []int, wantLoads int) {
		t.Helper()
		p, l := r.hook.take()
		require.Equal(t, wantPipelines, p, "script calls per pipeline")
		require.Equal(t, wantLoads, l, "SCRIPT LOADs")
	}

	// A new server has no scripts: EVALSHA meets NOSCRIPT, the script is
	// loaded once and the batch sent again.
	l1 := acquireOne(t, m, "s1").Lease
	require.NotNil(t, l1)
	requireCalls([]int{1, 1}, 1)
	l2 := acquireOne(t, m, "s2").Lease
	require.NotNil(t, l2)
	requireCalls([]int{1}, 0)

	flush()
	r3 := acquireOne(t, m, "s3")
	require.NoError(t, r3.Err)
	require.NotNil(t, r3.Lease)
	require.Greater(t, r3.Lease.Token(), l2.Token(), "the script ran")
	require.Equal(t, r3.Lease.Owner(), r.owner(t, "s3"))
	requireCalls([]int{1, 1}, 1)

	flush()
	rep := m.RenewAll(ctx)
	require.NoError(t, rep.Err)
	require.Equal(t, 3, rep.Renewed)
	require.Empty(t, rep.Lost)
	require.Empty(t, rep.Uncertain)
	requireCalls([]int{1, 1}, 1)
	rep = m.RenewAll(ctx)
	require.Equal(t, 3, rep.Renewed)
	requireCalls([]int{1}, 0)

	flush()
	require.NoError(t, m.Release(ctx, l1))
	require.Equal(t, Released, l1.State())
	require.Equal(t, "", r.owner(t, "s1"))
	requireCalls([]int{1, 1}, 1)

	flush()
	hs, err := m.Inspect(ctx, []string{"s1", "s2"})
	require.NoError(t, err)
	require.Equal(t, "", hs[0].Owner)
	require.Equal(t, l2.Owner(), hs[1].Owner)

	for _, l := range []*Lease{l2, r3.Lease} {
		require.Equal(t, Held, l.State())
	}
	require.NoError(t, m.ReleaseAll(ctx))
}

func TestRealFencingTokensStrictlyIncrease(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	a := r.manager(t, "a", useRealClock, withTTL(ttl))
	var tokens []int64
	take := func(m *Manager) *Lease {
		t.Helper()
		res := acquireOne(t, m, "s")
		require.NoError(t, res.Err)
		require.NotNil(t, res.Lease, "session should be free")
		tokens = append(tokens, res.Lease.Token())
		return res.Lease
	}

	// Release, then acquire again.
	l := take(a)
	require.NoError(t, a.Release(ctx, l))
	l = take(a)

	// Expiry in Redis (real TTL). The holder gave up first.
	r.gone(t, "s")
	require.Eventually(t, func() bool { return l.State() == Lost }, 2*time.Second, time.Millisecond)
	l = take(a)

	// SCRIPT FLUSH between acquisitions.
	require.NoError(t, a.Release(ctx, l))
	require.NoError(t, r.rdb.ScriptFlush(ctx).Err())
	l = take(a)

	// The worker "crashes" holding the lease and restarts as a new Manager
	// with the same holder id: its new owner value does not match the old
	// one, so it does not inherit the old acquisition.
	a2 := r.manager(t, "a", useRealClock, withTTL(ttl))
	res := acquireOne(t, a2, "s")
	require.NoError(t, res.Err)
	require.Nil(t, res.Lease, "a restarted holder must not inherit the crashed one's lease")
	require.Greater(t, res.Remaining, time.Duration(0))

	// Another worker takes the session once the crashed lease expires.
	b := r.manager(t, "b", useRealClock, withTTL(ttl))
	require.Eventually(t, func() bool { return tryAcquire(b, "s") != nil }, 2*time.Second, 5*time.Millisecond)
	lb := b.Get("s")
	require.NotNil(t, lb)
	tokens = append(tokens, lb.Token())
	require.Eventually(t, func() bool { return l.State() == Lost }, 2*time.Second, time.Millisecond)

	// And hands it to the restarted worker.
	require.NoError(t, b.Release(ctx, lb))
	take(a2)

	require.Len(t, tokens, 6)
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "strictly increasing: %v", tokens)
	}
	require.Equal(t, tokens[5], r.fence(t, "s"), "the counter is the last token")
	require.NoError(t, a2.ReleaseAll(ctx))
}

func TestRealExpiredLeaseTakenOverOnlyAfterHolderDeadline(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	const ttl = 250 * time.Millisecond
	a := r.manager(t, "a", useRealClock, withTTL(ttl))
	b := r.manager(t, "b", useRealClock, withTTL(ttl))

	la := acquireOne(t, a, "s").Lease
	require.NotNil(t, la)
	term := la.Context()

	first := acquireOne(t, b, "s")
	require.NoError(t, first.Err)
	require.Nil(t, first.Lease)
	require.Greater(t, first.Remaining, time.Duration(0))
	require.LessOrEqual(t, first.Remaining, ttl)

	// A never renews. Poll B until it gets the session.
	var lb *Lease
	var tookAt time.Time
	require.Eventually(t, func() bool {
		lb = tryAcquire(b, "s")
		tookAt = time.Now()
		return lb != nil
	}, 3*time.Second, 2*time.Millisecond)

	// By the time B's acquire returned, A's deadline had passed: A stopped
	// (or was due to stop) before Redis let B in.
	if st := la.State(); st != Lost {
		require.True(t, la.Deadline().Before(tookAt),
			"A is %v with deadline %v after B took the session at %v", st, la.Deadline(), tookAt)
	}
	require.Eventually(t, func() bool { return la.State() == Lost }, 2*time.Second, time.Millisecond)
	require.Error(t, term.Err())
	require.Equal(t, "deadline passed", la.Reason())
	require.Nil(t, a.Get("s"))
	require.Greater(t, lb.Token(), la.Token())
	require.Equal(t, lb.Owner(), r.owner(t, "s"))
	require.NoError(t, b.ReleaseAll(context.Background()))
}

func TestRealFailClosedWhenRedisGoesAway(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	const ttl = 400 * time.Millisecond
	var mu sync.Mutex
	var lostAt time.Time
	var moves []string
	m := r.manager(t, "a", useRealClock, withTTL(ttl), func(c *Config) {
		c.OnChange = func(_ *Lease, from, to State) {
			mu.Lock()
			defer mu.Unlock()
			moves = append(moves, from.String()+"->"+to.String())
			if to == Lost {
				lostAt = time.Now()
			}
		}
	})
	require.NoError(t, r.rdb.Set(ctx, realKeys.Fence("s"), 41, 0).Err())

	before := time.Now()
	l := acquireOne(t, m, "s").Lease
	sentBy := time.Now() // the acquire request was sent in [before, sentBy]
	require.NotNil(t, l)
	require.Greater(t, l.Token(), int64(41))
	drift := DefaultDriftMargin(ttl)
	require.False(t, l.Deadline().Before(before.Add(ttl-drift)))
	require.False(t, l.Deadline().After(sentBy.Add(ttl-drift)), "deadline is sent + TTL - drift")
	term := l.Context()

	// The renewal is bounded as the poller bounds it (a request timeout):
	// with go-redis's default dial retries an unbounded one against a dead
	// server blocks for seconds.
	r.srv.Stop()
	rctx, cancel := context.WithTimeout(ctx, ttl/4)
	rep := m.RenewAll(rctx)
	cancel()
	require.Error(t, term.Err(), "polling stops as soon as RenewAll returns")
	st := l.State()
	early := time.Now().Before(l.Deadline())
	require.Error(t, l.Context().Err())
	require.Zero(t, rep.Renewed)
	require.Empty(t, rep.Lost)
	if len(rep.Uncertain) == 0 {
		// The deadline passed before RenewAll read the lease (a slow
		// machine): it was already Lost, and there was nothing to renew.
		require.Equal(t, Lost, st)
		require.NoError(t, rep.Err)
	} else {
		require.Error(t, rep.Err)
		require.Equal(t, []*Lease{l}, rep.Uncertain)
	}
	if early { // else the deadline passed during RenewAll (a slow machine)
		require.Equal(t, Uncertain, st)
	}

	// OnChange runs after the state is set: wait for both.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return l.State() == Lost && !lostAt.IsZero()
	}, 3*time.Second, time.Millisecond)
	require.Equal(t, "deadline passed", l.Reason())
	mu.Lock()
	require.False(t, lostAt.Before(l.Deadline()), "lost at %v, before its deadline %v", lostAt, l.Deadline())
	if early {
		require.Equal(t, []string{"unknown->held", "held->uncertain", "uncertain->lost"}, moves)
	}
	mu.Unlock()
	require.True(t, l.Deadline().Before(sentBy.Add(ttl)), "local deadline is before sent + TTL, when Redis could let another in")
	require.Zero(t, m.Count())
	require.Equal(t, RenewReport{}, m.RenewAll(ctx), "nothing left to renew")

	// Redis comes back empty (no persistence): a fresh acquire works, and
	// the fencing counter has started over, below the token handed out
	// before. This is the documented limit of a restart without persistence.
	r.srv.Restart()
	r.hook.take()
	again := acquireOne(t, m, "s")
	require.NoError(t, again.Err)
	require.NotNil(t, again.Lease)
	require.Equal(t, Held, again.Lease.State())
	require.Greater(t, again.Lease.Token(), l.Token(), "the counter was lost with the data; the clock keeps the token above it")
	p, loads := r.hook.take()
	require.Equal(t, []int{1, 1}, p, "the restarted server had no scripts loaded")
	require.Equal(t, 1, loads)
	require.NoError(t, m.ReleaseAll(ctx))
}

func TestRealBatching10000Sessions(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	// BatchSize: default 500. The real clock: the fake one keeps its timers
	// in a slice, which makes 10,000 Reset and Stop calls quadratic.
	m := r.manager(t, "a", useRealClock)
	const n = 10000
	calls := n / DefaultBatchSize
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%05d", i)
	}

	res := m.Acquire(ctx, ids)
	p, loads := r.hook.take()
	require.Equal(t, []int{calls, calls}, p, "one pipeline, and one more after NOSCRIPT on a new server")
	require.Equal(t, 1, loads)
	for _, x := range res {
		require.NoError(t, x.Err)
		require.NotNil(t, x.Lease, x.Session)
		requireMinted(t, x.Lease.Token())
	}
	require.Equal(t, n, m.Count())

	// Shorten every TTL in Redis so that a renewal is visible.
	pipe := r.rdb.Pipeline()
	for _, id := range ids {
		pipe.PExpire(ctx, realKeys.Lease(id), 5*time.Second)
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)

	// A renewal cycle goes out at once as maxPipelines pipelines of 5 calls
	// (one round trip); the first also meets NOSCRIPT and resends all 20
	// calls in one more pipeline.
	quarter := calls / maxPipelines
	for i, want := range [][]int{{quarter, quarter, quarter, quarter, calls}, {quarter, quarter, quarter, quarter}} {
		rep := m.RenewAll(ctx)
		require.NoError(t, rep.Err)
		require.Equal(t, n, rep.Renewed)
		require.Empty(t, rep.Lost)
		require.Empty(t, rep.Uncertain)
		p, loads := r.hook.take()
		require.Equal(t, want, p, "RenewAll %d", i+1)
		require.Equal(t, len(p)-maxPipelines, loads, "the script is loaded once, when missing")
	}

	hs, err := m.Inspect(ctx, ids)
	require.NoError(t, err)
	for i, h := range hs {
		require.Equal(t, res[i].Lease.Owner(), h.Owner, h.Session)
		require.Greater(t, h.Remaining, 5*time.Second, "%s was not renewed", h.Session)
		require.Equal(t, Held, res[i].Lease.State())
	}

	require.NoError(t, m.ReleaseAll(ctx))
	require.Zero(t, m.Count())
	require.Equal(t, int64(n+2), r.rdb.DBSize(ctx).Val(), "only the fencing records (with their handoff marks), the loss marker and the token high-water mark remain")
	for i := range 10 {
		require.Equal(t, res[i*n/10].Lease.Token(), r.fence(t, ids[i*n/10]), "a release records the released token")
	}
}

func TestRealOtherOwnerCannotRenewOrRelease(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	a := r.manager(t, "a")
	b := r.manager(t, "b")
	la := acquireOne(t, a, "s").Lease
	require.NotNil(t, la)
	owner := la.Owner()

	rb := acquireOne(t, b, "s")
	require.NoError(t, rb.Err)
	require.Nil(t, rb.Lease)
	require.Greater(t, rb.Remaining, time.Duration(0))
	require.LessOrEqual(t, rb.Remaining, a.TTL())
	require.Equal(t, RenewReport{}, b.RenewAll(ctx))
	require.NoError(t, b.ReleaseAll(ctx))

	tests := []struct {
		name string
		give string // owner value B sends
	}{
		{"another holder", "b#0123456789abcdef"},
		{"same holder, another acquisition", HolderOf(owner) + "#0000000000000000"},
		{"holder id alone", HolderOf(owner)},
		{"prefix of the owner value", owner[:len(owner)-1]},
		{"owner value with a suffix", owner + "0"},
		{"owner value in upper case", strings.ToUpper(owner)},
		{"empty", ""},
	}
	record := r.fence(t, "s")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := r.pttl(t, "s")
			forged := map[string]string{"s": tt.give}
			require.Equal(t, []int64{1}, runRenew(t, r.rdb, 3600_000, forged, "s"), "not renewed")
			require.Equal(t, []int64{0}, runRelease(t, r, r.rdb, forged, "s"))
			require.Equal(t, owner, r.owner(t, "s"))
			got := r.pttl(t, "s")
			require.Greater(t, got, int64(0))
			require.LessOrEqual(t, got, before, "TTL must not be extended")
			require.Equal(t, record, r.fence(t, "s"), "the fencing record is untouched")
		})
	}

	rep := a.RenewAll(ctx)
	require.Equal(t, 1, rep.Renewed)
	require.Equal(t, Held, la.State())
	require.NoError(t, a.ReleaseAll(ctx))
}

func TestRealAcquireIdempotentUnderClientRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("the script run twice with one owner value INCRs once", func(t *testing.T) {
		r := startReal(t)
		require.NoError(t, r.rdb.ConfigResetStat(ctx).Err())
		owners := map[string]string{"s": "a#1"}
		first, _ := runAcquire(t, r.rdb, 10000, owners, "s")
		retry, _ := runAcquire(t, r.rdb, 10000, owners, "s")
		requireMinted(t, first[0])
		require.Equal(t, []int64{0, -1}, first[1:])
		require.Equal(t, first, retry, "the retry mints nothing")
		require.Equal(t, first[0], r.fence(t, "s"))
		require.Equal(t, 2, setCalls(t, r.rdb), "one SET of the counter, one of the lease")
	})

	t.Run("go-redis resends after the reply is lost", func(t *testing.T) {
		r := startReal(t)
		d := &lossyDialer{}
		c := lossyClient(t, r.srv, d, 3) // go-redis default retries
		require.NoError(t, redis.NewScript(lua.Acquire).Load(ctx, r.rdb).Err())
		require.NoError(t, r.rdb.ConfigResetStat(ctx).Err())
		m := r.manager(t, "a", func(cfg *Config) { cfg.Client = c })
		d.armed.Store(true)
		res := acquireOne(t, m, "s")
		require.Equal(t, int32(1), d.drops.Load(), "one reply was lost")
		require.NoError(t, res.Err)
		require.NotNil(t, res.Lease)
		require.Equal(t, r.fence(t, "s"), res.Lease.Token())
		require.Equal(t, res.Lease.Owner(), r.owner(t, "s"))
		require.Equal(t, 5, setCalls(t, r.rdb), "the script ran twice; the loss marker and the lease were set once, the token high-water mark by each run")
		require.NoError(t, m.ReleaseAll(ctx))
	})

	t.Run("a later Acquire retries with the same owner value", func(t *testing.T) {
		r := startReal(t)
		d := &lossyDialer{}
		c := lossyClient(t, r.srv, d, -1) // no go-redis retries: the error reaches the manager
		require.NoError(t, redis.NewScript(lua.Acquire).Load(ctx, r.rdb).Err())
		m := r.manager(t, "a", func(cfg *Config) { cfg.Client = c })
		d.armed.Store(true)
		res := acquireOne(t, m, "s")
		require.Error(t, res.Err)
		require.Nil(t, res.Lease, "an unknown outcome is not ownership")
		require.Zero(t, m.Count())
		landed := r.owner(t, "s")
		require.NotEmpty(t, landed, "the request ran in Redis")

		res = acquireOne(t, m, "s")
		require.NoError(t, res.Err)
		require.NotNil(t, res.Lease)
		require.Equal(t, landed, res.Lease.Owner())
		require.Equal(t, r.fence(t, "s"), res.Lease.Token(), "the retry's token, minted again (the landed one's was never recorded nor used) and recorded, so that a further retry gets it")
		require.NoError(t, m.ReleaseAll(ctx))
	})

	// One call passes each owner value once, with the number of sessions
	// it is for (acquire.lua, renew.lua): a retried session keeps its
	// value beside the sessions acquired anew, which share theirs.
	t.Run("a retried session and new ones in one call, then renewed", func(t *testing.T) {
		r := startReal(t)
		d := &lossyDialer{}
		c := lossyClient(t, r.srv, d, -1)
		require.NoError(t, redis.NewScript(lua.Acquire).Load(ctx, r.rdb).Err())
		m := r.manager(t, "a", func(cfg *Config) { cfg.Client = c })
		d.armed.Store(true)
		require.Error(t, acquireOne(t, m, "m").Err)
		landed := r.owner(t, "m")
		require.NotEmpty(t, landed)

		res := m.Acquire(ctx, []string{"z", "m", "b"}) // "m" sorts between the others' value and after it: runs reorder the call
		owners := map[string]string{}
		for _, x := range res {
			require.NoError(t, x.Err, x.Session)
			require.NotNil(t, x.Lease, x.Session)
			require.Equal(t, x.Lease.Owner(), r.owner(t, x.Session), "the lease key holds %s's value", x.Session)
			owners[x.Session] = x.Lease.Owner()
		}
		require.Equal(t, landed, owners["m"], "the retried session keeps the value of its lost reply")
		require.Equal(t, owners["z"], owners["b"], "the sessions acquired anew share the call's value")
		require.NotEqual(t, landed, owners["b"])
		require.Equal(t, "z", res[0].Session, "results in the caller's order")

		require.NoError(t, r.rdb.Set(ctx, realKeys.Lease("m"), "other#1", time.Minute).Err())
		rep := m.RenewAll(ctx)
		require.NoError(t, rep.Err)
		require.Equal(t, 2, rep.Renewed)
		require.Len(t, rep.Lost, 1)
		require.Equal(t, "m", rep.Lost[0].Session(), "the lease another value holds, and only it, is lost")
		require.Equal(t, "other#1", r.owner(t, "m"), "not extended, not deleted")
		require.NoError(t, m.ReleaseAll(ctx))
	})
}

// setCalls is how many SETs Redis ran since CONFIG RESETSTAT (commands run
// by scripts included).
func setCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	st, err := redisstats.Read(context.Background(), c)
	require.NoError(t, err)
	return int(st.Commands["set"].Calls)
}

// A manager that retries an acquire whose reply was lost adopts the lease
// with a deadline counted from the retry, but acquire.lua does not extend the
// key on the retried path: Redis lets another holder in while the first
// still believes it holds the lease.
func TestRealRetriedAcquireResetsRedisTTL(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	d := &lossyDialer{}
	c := lossyClient(t, r.srv, d, -1)
	require.NoError(t, redis.NewScript(lua.Acquire).Load(ctx, r.rdb).Err())
	a := r.manager(t, "a", useRealClock, withTTL(ttl), func(cfg *Config) { cfg.Client = c })
	b := r.manager(t, "b", useRealClock, withTTL(ttl))

	d.armed.Store(true)
	require.Error(t, acquireOne(t, a, "s").Err, "reply lost")
	// Half the TTL passes in Redis before the manager retries.
	require.Eventually(t, func() bool {
		ms := r.rdb.PTTL(ctx, realKeys.Lease("s")).Val()
		return ms > 0 && ms < 150*time.Millisecond
	}, 2*time.Second, time.Millisecond)
	la := acquireOne(t, a, "s").Lease
	require.NotNil(t, la)
	t.Logf("after the retry: Redis PTTL %dms, local deadline in %v", r.pttl(t, "s"), time.Until(la.Deadline()))

	require.Eventually(t, func() bool { return tryAcquire(b, "s") != nil }, 2*time.Second, time.Millisecond)
	require.False(t, la.State() == Held && time.Now().Before(la.Deadline()),
		"B holds the session while A is still Held for another %v", time.Until(la.Deadline()))
}

// acquire.lua's retried path reads the counter with tonumber(GET); when the
// counter key is missing (evicted, or lost in a failover) that is nil, which
// a Lua array cannot hold: the reply loses an element and every session of
// the batch gets an error.
func TestRealAcquireRetryWithMissingCounter(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	r.seed(t, seed{held: map[string]string{"mine": "a#1"}})
	got, _ := runAcquire(t, r.rdb, 10000, map[string]string{"mine": "a#1", "free": "a#2"}, "mine", "free")
	require.Len(t, got, 6, "three integers per session, got %v", got)
}

// A renewal sent before the local deadline whose reply comes back after the
// deadline timer fired: Redis extended the key with our owner value, the
// lease is Lost locally, but Manager.extend returns early for a lease that is
// no longer Held or Uncertain and never queues it in m.stale, unlike its
// "renewed past deadline" branch. Nobody releases the key: the session stays
// locked, for this manager too, for a whole TTL.
func TestRealRenewalRacingDeadlineDropsKey(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	slow := &beforeScripts{}
	r.counted.AddHook(slow)
	m := r.manager(t, "a", func(c *Config) { c.Clock = clk }) // TTL 10s
	l := acquireOne(t, m, "s").Lease
	require.NotNil(t, l)

	// The renewal leaves 1ms before the deadline; while it is on the wire
	// the deadline passes and the timer marks the lease Lost.
	clk.Step(l.Deadline().Sub(clk.Now()) - time.Millisecond)
	var lostInFlight bool
	slow.set(func() {
		clk.Step(2 * time.Millisecond)
		lostInFlight = waitState(l, Lost, 2*time.Second)
	})
	rep := m.RenewAll(ctx)
	require.True(t, lostInFlight)
	require.Equal(t, []*Lease{l}, rep.Lost)
	require.Equal(t, l.Owner(), r.owner(t, "s"), "Redis renewed the key for the full TTL")

	// The next cycle should release it (dropStale), so the session can be
	// taken again at once.
	m.RenewAll(ctx)
	require.NotEqual(t, l.Owner(), r.owner(t, "s"), "key still held by a lease its holder gave up, PTTL %dms", r.pttl(t, "s"))
	require.NotNil(t, tryAcquire(m, "s"))
}
