package greedyplan_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/bench/internal/greedyplan"
	"github.com/pollworker/pollworker/keyspace"
)

// TestAssignMovesFewerThanGreedy adds sessions one by one to a running
// fleet and counts the existing sessions whose owner changes under
// package assign and under the previous policy (greedy in hash order) in
// the same run: assign never moves more.
func TestAssignMovesFewerThanGreedy(t *testing.T) {
	for _, tc := range []struct{ workers, base, adds int }{
		{10, 100_000, 50},
		{50, 100_000, 30},
	} {
		t.Run(fmt.Sprintf("%dx%d", tc.base, tc.workers), func(t *testing.T) {
			ws := make([]string, tc.workers)
			for i := range ws {
				ws[i] = fmt.Sprintf("w%d", i+1)
			}
			f := assign.NewFleetIDs(ws...)
			sizes := randomSizes(tc.base, 5)
			prev := f.Plan(sizes, 0.05)
			prevOld := greedyOwners(ws, sizes)
			moves, movesOld := 0, 0
			for i := range tc.adds {
				added := keyspace.BucketOf(fmt.Sprintf("added-%d", i))
				sizes[added]++
				p := f.Plan(sizes, 0.05)
				old := greedyOwners(ws, sizes)
				for b := range assign.Buckets {
					n := sizes[b]
					if b == added {
						n-- // the new session itself does not count
					}
					if p.Owner(b) != prev.Owner(b) {
						moves += n
					}
					if old[b] != prevOld[b] {
						movesOld += n
					}
				}
				prev, prevOld = p, old
			}
			t.Logf("existing sessions moved over %d adds: %d (greedy in hash order: %d)", tc.adds, moves, movesOld)
			require.LessOrEqual(t, moves, movesOld)
		})
	}
}

// randomSizes spreads sessions with random ids over the index buckets.
func randomSizes(sessions int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	sizes := make([]int, assign.Buckets)
	for range sessions {
		sizes[keyspace.BucketOf(fmt.Sprintf("%016x", r.Uint64()))]++
	}
	return sizes
}

// greedyOwners is the placement before package assign, over the index
// buckets.
func greedyOwners(ws []string, sizes []int) []string {
	keys := make([]string, len(sizes))
	for b := range keys {
		keys[b] = assign.BucketKey(b)
	}
	return greedyplan.Owners(ws, keys, sizes, 0.05)
}
