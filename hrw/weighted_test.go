package hrw

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAssignWeighted(t *testing.T) {
	tbl := NewIDs("a", "b", "c")
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = "bucket-" + strconv.Itoa(i)
	}
	plain := tbl.Assign(keys, nil)

	tests := []struct {
		name  string
		sizes func(i int) int
	}{
		{"few items in few buckets", func(i int) int {
			if i%41 == 0 {
				return 1
			}
			return 0
		}},
		{"uneven", func(i int) int { return i % 7 }},
		{"one big bucket", func(i int) int {
			if i == 5 {
				return 500
			}
			return i % 2
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sizes := make([]int, len(keys))
			total := 0
			for i := range sizes {
				sizes[i] = tc.sizes(i)
				total += sizes[i]
			}
			got := tbl.AssignWeighted(keys, sizes, 0.05, nil)
			load := make([]int, tbl.Len())
			for i, o := range got {
				load[o] += sizes[i]
				if sizes[i] == 0 {
					require.Equal(t, plain[i], o, "an empty bucket stays with its rendezvous owner")
				}
			}
			capacity := tbl.capacities(total, 0.05)[0]
			big := 0
			for _, s := range sizes {
				big = max(big, s)
			}
			for _, l := range load {
				if big <= capacity {
					require.LessOrEqual(t, l, capacity, "loads %v", load)
				}
			}
			require.Equal(t, got, tbl.AssignWeighted(keys, sizes, 0.05, nil), "deterministic")
		})
	}
	require.Equal(t, tbl.AssignBounded(keys, 0.1, nil), tbl.AssignWeighted(keys, nil, 0.1, nil))
}
