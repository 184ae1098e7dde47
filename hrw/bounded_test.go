package hrw

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func countLoads(out []int, n int) []int {
	l := make([]int, n)
	for _, o := range out {
		l[o]++
	}
	return l
}

func TestAssignBoundedCapsLoad(t *testing.T) {
	tests := []struct {
		name  string
		nodes []string
		keys  int
		slack float64
	}{
		{"300 on w1..w3", []string{"w1", "w2", "w3"}, 300, 0.1},
		{"300 on w1..w3 tight", []string{"w1", "w2", "w3"}, 300, 0},
		{"90 on 3", []string{"a", "b", "c"}, 90, 0.1},
		{"1000 on 7", []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7"}, 1000, 0.05},
		{"fewer keys than nodes", []string{"a", "b", "c", "d"}, 2, 0.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := NewIDs(tt.nodes...)
			keys := seqKeys(tt.keys)
			out := tb.AssignBounded(keys, tt.slack, nil)
			caps := tb.capacities(len(keys), tt.slack)
			for i, l := range countLoads(out, tb.Len()) {
				require.LessOrEqual(t, l, caps[i], "node %s", tb.ID(i))
			}
			// Deterministic whatever the key order.
			rev := make([]string, len(keys))
			for i, k := range keys {
				rev[len(keys)-1-i] = k
			}
			outRev := tb.AssignBounded(rev, tt.slack, nil)
			for i := range keys {
				require.Equal(t, out[i], outRev[len(keys)-1-i])
			}
		})
	}
}

func TestAssignBoundedKeepsOwnersWhenBalanced(t *testing.T) {
	tb := NewIDs("a", "b", "c", "d", "e")
	keys := seqKeys(100_000)
	require.Equal(t, tb.Assign(keys, nil), tb.AssignBounded(keys, 0.05, nil))
	// A negative slack is plain Assign.
	small := seqKeys(300)
	require.Equal(t, tb.Assign(small, nil), tb.AssignBounded(small, -1, nil))
}

func TestAssignBoundedMovesLittleOnJoin(t *testing.T) {
	keys := seqKeys(3000)
	before := NewIDs("w1", "w2", "w3")
	after := NewIDs("w1", "w2", "w3", "w4")
	b := before.AssignBounded(keys, 0.1, nil)
	a := after.AssignBounded(keys, 0.1, nil)
	moved, toNew := 0, 0
	for i := range keys {
		if before.ID(b[i]) != after.ID(a[i]) {
			moved++
			if after.ID(a[i]) == "w4" {
				toNew++
			}
		}
	}
	ideal := len(keys) / 4
	t.Logf("moved %d (ideal %d), %d to the newcomer", moved, ideal, toNew)
	require.LessOrEqual(t, float64(moved), 1.15*float64(ideal))
	require.GreaterOrEqual(t, float64(toNew), 0.95*float64(moved))
}

func TestAssignBoundedWeighted(t *testing.T) {
	tb, err := New(Node{ID: "big", Weight: 2}, Node{ID: "s1"}, Node{ID: "s2"})
	require.NoError(t, err)
	keys := seqKeys(400)
	l := countLoads(tb.AssignBounded(keys, 0.05, nil), 3)
	caps := tb.capacities(400, 0.05)
	require.Equal(t, []int{210, 105, 105}, caps)
	for i := range l {
		require.LessOrEqual(t, l[i], caps[i])
	}
}
