package hrw

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// loads counts the keys each node owns, indexed as in tb.Nodes().
func loads(tb *Table, keys []string) []int {
	n := make([]int, tb.Len())
	for _, i := range tb.Assign(keys, nil) {
		n[i]++
	}
	return n
}

// maxOverMean returns the largest load divided by the mean load.
func maxOverMean(counts []int) float64 {
	sum, most := 0, 0
	for _, c := range counts {
		sum += c
		most = max(most, c)
	}
	return float64(most) * float64(len(counts)) / float64(sum)
}

func TestBalance(t *testing.T) {
	// With k keys per node the loads are close to normal with standard
	// deviation about sqrt(k): k = 10000 gives sigma = 1%, so 1.05 is 5
	// sigma; k = 1000 gives sigma = 3.2%, and the expected maximum of 100
	// nodes is about 2.5 sigma (1.08), so 1.15 is 4.7 sigma.
	tests := []struct {
		name  string
		nodes int
		keys  []string
		bound float64
	}{
		{"sequential/10 nodes", 10, seqKeys(100_000), 1.05},
		{"sequential/100 nodes", 100, seqKeys(100_000), 1.15},
		{"uuid/10 nodes", 10, uuidKeys(100_000, 1), 1.05},
		{"uuid/100 nodes", 100, uuidKeys(100_000, 1), 1.15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counts := loads(NewIDs(nodeIDs("worker", tt.nodes)...), tt.keys)
			ratio := maxOverMean(counts)
			t.Logf("max/mean load = %.4f (min %d, max %d, mean %d)",
				ratio, minOf(counts), maxOf(counts), len(tt.keys)/tt.nodes)
			require.LessOrEqual(t, ratio, tt.bound)
			require.Positive(t, minOf(counts))
		})
	}
}

func minOf(s []int) int {
	m := s[0]
	for _, v := range s {
		m = min(m, v)
	}
	return m
}

func maxOf(s []int) int {
	m := s[0]
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

func TestWeightedBalance(t *testing.T) {
	tests := []struct {
		name    string
		weights []float64
	}{
		{"one node weight 2 of 10", []float64{2, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{"weights 1 2 3 4", []float64{1, 2, 3, 4}},
		{"one node weight 0.5 of 5", []float64{1, 1, 0.5, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ids := nodeIDs("worker", len(tt.weights))
			nodes := make([]Node, len(ids))
			total := 0.0
			for i, id := range ids {
				nodes[i] = Node{ID: id, Weight: tt.weights[i]}
				total += tt.weights[i]
			}
			tb := mustNew(t, nodes...)
			for name, keys := range map[string][]string{"sequential": seqKeys(100_000), "uuid": uuidKeys(100_000, 2)} {
				counts := loads(tb, keys)
				worst := 1.0
				for i, c := range counts {
					// Nodes() is sorted like ids, so index i has weights[i].
					ratio := float64(c) / float64(len(keys)) / (tt.weights[i] / total)
					require.InDelta(t, 1, ratio, 0.05, "%s weight %v", ids[i], tt.weights[i])
					if math.Abs(ratio-1) > math.Abs(worst-1) {
						worst = ratio
					}
				}
				t.Logf("%s: worst share/expected share = %.4f", name, worst)
			}
		})
	}
}

func TestWeightTwoGetsTwiceTheShare(t *testing.T) {
	nodes := []Node{{"heavy", 2}}
	for _, id := range nodeIDs("light", 9) {
		nodes = append(nodes, Node{ID: id, Weight: 1})
	}
	tb := mustNew(t, nodes...)
	for name, keys := range map[string][]string{"sequential": seqKeys(100_000), "uuid": uuidKeys(100_000, 6)} {
		heavy, light := 0, 0
		for _, id := range ownerIDs(tb, keys) {
			if id == "heavy" {
				heavy++
			} else {
				light++
			}
		}
		ratio := float64(heavy) / (float64(light) / 9)
		t.Logf("%s: heavy share / mean light share = %.4f", name, ratio)
		require.InEpsilon(t, 2, ratio, 0.05)
	}
}

func TestMinimalMovementAdd(t *testing.T) {
	keys := append(seqKeys(100_000), uuidKeys(100_000, 3)...)
	ids := nodeIDs("worker", 10)
	weightedNodes := func(ids []string) []Node {
		ns := make([]Node, len(ids))
		for i, id := range ids {
			ns[i] = Node{ID: id, Weight: 1 + float64(i%3)}
		}
		return ns
	}
	tests := []struct {
		name      string
		before    *Table
		after     *Table
		newcomer  string
		wantShare float64
	}{
		{"unweighted", NewIDs(ids...), NewIDs(append(ids, "worker-new")...), "worker-new", 1.0 / 11},
		// Weights of the 10: 1,2,3,1,2,3,1,2,3,1 (sum 19); newcomer weight 1.
		{"weighted", mustNew(t, weightedNodes(ids)...),
			mustNew(t, append(weightedNodes(ids), Node{"worker-new", 1})...), "worker-new", 1.0 / 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ownerIDs(tt.before, keys)
			after := ownerIDs(tt.after, keys)
			moved := 0
			for i := range keys {
				if before[i] != after[i] {
					moved++
					require.Equal(t, tt.newcomer, after[i], "key %q moved between old nodes", keys[i])
				}
			}
			frac := float64(moved) / float64(len(keys))
			t.Logf("moved %d of %d keys (%.4f, want %.4f)", moved, len(keys), frac, tt.wantShare)
			require.InEpsilon(t, tt.wantShare, frac, 0.10)
		})
	}
}

func TestMinimalMovementRemove(t *testing.T) {
	keys := append(seqKeys(50_000), uuidKeys(50_000, 4)...)
	ids := nodeIDs("worker", 10)
	for _, gone := range []string{"worker-00", "worker-04", "worker-09"} {
		t.Run(gone, func(t *testing.T) {
			var rest []string
			for _, id := range ids {
				if id != gone {
					rest = append(rest, id)
				}
			}
			before := ownerIDs(NewIDs(ids...), keys)
			after := ownerIDs(NewIDs(rest...), keys)
			for i := range keys {
				if before[i] != gone {
					require.Equal(t, before[i], after[i], "key %q moved among survivors", keys[i])
				} else {
					require.NotEqual(t, gone, after[i])
				}
			}
		})
	}
}

func TestMinimalMovementReweight(t *testing.T) {
	keys := seqKeys(50_000)
	ids := nodeIDs("worker", 8)
	nodes := make([]Node, len(ids))
	for i, id := range ids {
		nodes[i] = Node{ID: id, Weight: 1 + float64(i%2)}
	}
	before := ownerIDs(mustNew(t, nodes...), keys)
	for _, w := range []float64{0.25, 4} {
		t.Run(fmt.Sprintf("weight %v", w), func(t *testing.T) {
			changed := append([]Node(nil), nodes...)
			changed[3].Weight = w
			after := ownerIDs(mustNew(t, changed...), keys)
			moved := 0
			for i := range keys {
				if before[i] != after[i] {
					moved++
					require.Contains(t, []string{before[i], after[i]}, ids[3], "key %q moved between other nodes", keys[i])
				}
			}
			require.Positive(t, moved)
		})
	}
}

func ownerIDs(tb *Table, keys []string) []string {
	ids := make([]string, len(keys))
	for i, idx := range tb.Assign(keys, nil) {
		ids[i] = tb.ID(idx)
	}
	return ids
}
