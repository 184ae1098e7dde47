package assign

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/hrw"
	"github.com/pollworker/pollworker/keyspace"
)

func workers(n int) []string {
	ws := make([]string, n)
	for i := range ws {
		ws[i] = fmt.Sprintf("w%d", i+1)
	}
	return ws
}

// randomSizes spreads sessions random ids over the buckets.
func randomSizes(sessions int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	sizes := make([]int, Buckets)
	for range sessions {
		sizes[keyspace.BucketOf(fmt.Sprintf("%016x", r.Uint64()))]++
	}
	return sizes
}

func owners(p *Plan) []string {
	out := make([]string, Buckets)
	for b := range out {
		out[b] = p.Owner(b)
	}
	return out
}

func TestPlanEveryBucketHasOneLiveOwner(t *testing.T) {
	for _, tc := range []struct {
		name     string
		workers  int
		sessions int
		slack    float64
	}{
		{"one worker", 1, 100, 0.05},
		{"few sessions", 3, 30, 0.05},
		{"unbounded", 5, 1000, -1},
		{"many", 10, 50_000, 0.05},
		{"tight", 7, 5_000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := workers(tc.workers)
			p := NewFleetIDs(ws...).Plan(randomSizes(tc.sessions, 1), tc.slack)
			total := 0
			for b := range Buckets {
				require.Contains(t, ws, p.Owner(b))
			}
			for _, w := range ws {
				total += p.Load(w)
			}
			require.Equal(t, tc.sessions, total)
			require.Equal(t, tc.sessions, p.Total())
		})
	}
}

func TestPlanNoWorkers(t *testing.T) {
	p := NewFleetIDs().Plan(randomSizes(10, 1), 0.05)
	require.Equal(t, "", p.Owner(0))
	require.Equal(t, "", p.OwnerOf("s"))
	require.Equal(t, "", p.Watcher(0))
	require.Equal(t, 0, p.Load("w1"))
}

func TestPlanWithinCaps(t *testing.T) {
	for _, tc := range []struct{ workers, sessions int }{{3, 30}, {3, 300}, {10, 10_000}, {50, 100_000}, {4, 17}} {
		t.Run(fmt.Sprintf("%dx%d", tc.sessions, tc.workers), func(t *testing.T) {
			for seed := range uint64(5) {
				ws := workers(tc.workers)
				p := NewFleetIDs(ws...).Plan(randomSizes(tc.sessions, seed), 0.05)
				for _, w := range ws {
					require.LessOrEqual(t, p.Load(w), p.Cap(w), "worker %s", w)
					exact := (tc.sessions*105 + 100*tc.workers - 1) / (100 * tc.workers)
					require.LessOrEqual(t, p.Cap(w), exact+1, "cap never above ceil(mean×1.05)")
				}
			}
		})
	}
}

func TestPlanWeighted(t *testing.T) {
	f, err := NewFleet(Member{ID: "big", Weight: 2}, Member{ID: "a"}, Member{ID: "b"})
	require.NoError(t, err)
	p := f.Plan(randomSizes(40_000, 3), 0.05)
	require.InDelta(t, 20_000, p.Load("big"), 1_000)
	require.InDelta(t, 10_000, p.Load("a"), 600)
	_, err = NewFleet(Member{ID: "x", Weight: -1})
	require.ErrorIs(t, err, hrw.ErrInvalidWeight)
}

func TestPlanOneHugeBucketStays(t *testing.T) {
	sizes := make([]int, Buckets)
	sizes[7] = 1000
	sizes[8] = 1
	p := NewFleetIDs(workers(3)...).Plan(sizes, 0.05)
	require.Equal(t, NewFleetIDs(workers(3)...).Plan(sizes, -1).Owner(7), p.Owner(7))
}

func TestPlanIndependentOfMemberOrder(t *testing.T) {
	sizes := randomSizes(3000, 9)
	a := NewFleetIDs("w1", "w2", "w3", "w4").Plan(sizes, 0.05)
	b := NewFleetIDs("w4", "w2", "w1", "w3", "w2").Plan(sizes, 0.05)
	require.Equal(t, owners(a), owners(b))
}

// moved counts the sessions whose owner differs between a and b, and among
// them those that moved between two workers both in keep.
func moved(a, b *Plan, sizes []int, keep []string) (all, between int) {
	for bk := range Buckets {
		oa, ob := a.Owner(bk), b.Owner(bk)
		if oa == ob {
			continue
		}
		all += sizes[bk]
		if slices.Contains(keep, oa) && slices.Contains(keep, ob) {
			between += sizes[bk]
		}
	}
	return all, between
}

func TestPlanLeaveAndJoinMoveOnlyTheirShare(t *testing.T) {
	for _, tc := range []struct {
		name     string
		workers  int
		sessions int
		slack    float64
		maxShare float64 // of the sessions that may move between others
	}{
		{"unbounded", 5, 20_000, -1, 0},
		{"bounded many", 10, 100_000, 0.05, 0.002},
		{"bounded few", 3, 300, 0.05, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := workers(tc.workers)
			sizes := randomSizes(tc.sessions, 4)
			all := NewFleetIDs(ws...).Plan(sizes, tc.slack)
			less := NewFleetIDs(ws[1:]...).Plan(sizes, tc.slack)
			// A leave (all -> less): only w1's sessions must move.
			_, between := moved(all, less, sizes, ws[1:])
			require.LessOrEqual(t, float64(between), tc.maxShare*float64(tc.sessions), "leave")
			// A join (less -> all): sessions move to w1 only.
			_, between = moved(less, all, sizes, ws[1:])
			require.LessOrEqual(t, float64(between), tc.maxShare*float64(tc.sessions), "join")
		})
	}
}

// TestPlanAddingSessionsMovesFew adds sessions one by one to a running
// fleet and counts the existing sessions whose owner changes. The
// comparison with the previous policy (greedy in hash order) in the same
// run is bench/internal/greedyplan's TestAssignMovesFewerThanGreedy.
func TestPlanAddingSessionsMovesFew(t *testing.T) {
	for _, tc := range []struct {
		workers, base, adds int
		maxMoves            int
	}{
		{10, 100_000, 50, 0},
		{50, 100_000, 30, 60}, // a bucket holds ~6 sessions here: a shed moves ~6
	} {
		t.Run(fmt.Sprintf("%dx%d", tc.base, tc.workers), func(t *testing.T) {
			f := NewFleetIDs(workers(tc.workers)...)
			sizes := randomSizes(tc.base, 5)
			prev := f.Plan(sizes, 0.05)
			moves := 0
			for i := range tc.adds {
				added := keyspace.BucketOf(fmt.Sprintf("added-%d", i))
				sizes[added]++
				p := f.Plan(sizes, 0.05)
				for b := range Buckets {
					n := sizes[b]
					if b == added {
						n-- // the new session itself does not count
					}
					if p.Owner(b) != prev.Owner(b) {
						moves += n
					}
				}
				prev = p
			}
			t.Logf("existing sessions moved over %d adds: %d", tc.adds, moves)
			require.LessOrEqual(t, moves, tc.maxMoves)
		})
	}
}

func TestPlanWatcherIsBestAfterOwner(t *testing.T) {
	ws := workers(4)
	f := NewFleetIDs(ws...)
	p := f.Plan(randomSizes(200, 2), 0.05)
	bound := 0
	for b := range Buckets {
		owner, watcher := p.Owner(b), p.Watcher(b)
		require.NotEqual(t, owner, watcher)
		rank := hrw.NewIDs(ws...).Rank(BucketKey(b), 2)
		if p.Preferred(b) {
			require.Equal(t, rank[1], watcher)
		} else {
			bound++
			require.Equal(t, rank[0], watcher)
		}
	}
	require.Positive(t, bound, "200 sessions over 4 workers: the bound moved some buckets")
	require.Equal(t, "", NewFleetIDs("solo").Plan(nil, 0.05).Watcher(3))
}

func TestRankMatchesHRW(t *testing.T) {
	f := NewFleetIDs(workers(5)...)
	for _, id := range []string{"a", "api-1", "x/y"} {
		require.Equal(t, hrw.NewIDs(workers(5)...).Rank(BucketKey(keyspace.BucketOf(id)), 5), f.Rank(id))
		require.Equal(t, f.Rank(id)[0], f.Plan(nil, 0.05).OwnerOf(id))
	}
	require.True(t, f.Contains("w3"))
	require.False(t, f.Contains("w9"))
}

func TestCapacityGrid(t *testing.T) {
	for total := 0; total < 100; total++ {
		require.Equal(t, total, quantize(total, 0.05), "exact below a few hundred")
	}
	prev, changes := Capacity(10_000, 0.1, 0.05), 0
	for total := 10_000; total < 11_000; total++ {
		c := Capacity(total, 0.1, 0.05)
		require.LessOrEqual(t, c, int(float64(total)*0.1*1.05)+1)
		require.GreaterOrEqual(t, float64(c), float64(total)*0.1*1.05*0.99)
		if c != prev {
			changes++
		}
		prev = c
	}
	// 10% growth crosses about 1000/64 grid steps (64 = largest power of two ≤ 1%).
	require.LessOrEqual(t, changes, 17)
	require.Equal(t, 5, quantize(5, 0))
}

func TestOwners(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	got := Owners([]string{"w1", "w2"}, ids, 0.05)
	require.Len(t, got, 4)
	for _, o := range got {
		require.Contains(t, []string{"w1", "w2"}, o)
	}
	require.Equal(t, []string{"", ""}, Owners(nil, []string{"a", "b"}, 0.05))
}

func BenchmarkPlan(b *testing.B) {
	for _, tc := range []struct{ workers, sessions int }{{10, 100_000}, {50, 1_000_000}, {3, 300}} {
		b.Run(fmt.Sprintf("%dx%d", tc.sessions, tc.workers), func(b *testing.B) {
			f := NewFleetIDs(workers(tc.workers)...)
			sizes := randomSizes(tc.sessions, 1)
			for b.Loop() {
				f.Plan(sizes, 0.05)
			}
		})
	}
}
