package assign

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpaces: the buckets of a selector's space are placed among the
// fleet it is given (the matching workers) with rankings of their own; a
// join of a matching worker moves buckets only to it, a leave only off
// the worker that left, and a space with no worker places nothing.
func TestSpaces(t *testing.T) {
	sizes := make([]int, Buckets)
	for b := range sizes {
		sizes[b] = 1 + b%3
	}
	eu := func(ids ...string) *Fleet {
		ms := make([]Member, len(ids))
		for i, id := range ids {
			ms[i] = Member{ID: id}
		}
		f, err := NewFleetIn("zone=eu", ms...)
		require.NoError(t, err)
		return f
	}
	for _, tc := range []struct {
		name          string
		before, after []string
		slack         float64
	}{
		{"join, unbounded", []string{"eu1", "eu2"}, []string{"eu1", "eu2", "eu3"}, -1},
		{"leave, unbounded", []string{"eu1", "eu2", "eu3"}, []string{"eu1", "eu3"}, -1},
		{"join, bounded", []string{"eu1", "eu2"}, []string{"eu1", "eu2", "eu3"}, 0.05},
		{"leave, bounded", []string{"eu1", "eu2", "eu3"}, []string{"eu1", "eu3"}, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p0, p1 := eu(tc.before...).Plan(sizes, tc.slack), eu(tc.after...).Plan(sizes, tc.slack)
			moved, onlyChange := 0, 0
			for b := range Buckets {
				o0, o1 := p0.Owner(b), p1.Owner(b)
				require.Contains(t, tc.after, o1)
				if o0 == o1 {
					continue
				}
				moved++
				if !p1.Fleet().Contains(o0) || !p0.Fleet().Contains(o1) {
					onlyChange++ // to the newcomer, or off the leaver
				}
			}
			require.Positive(t, moved)
			if tc.slack < 0 {
				require.Equal(t, moved, onlyChange, "unbounded: only the joiner or leaver's buckets move")
			} else {
				require.GreaterOrEqual(t, float64(onlyChange), 0.95*float64(moved), "bounded: a few more at most")
			}
			per := map[string]int{}
			for b := range Buckets {
				per[p1.Owner(b)] += sizes[b]
			}
			for _, id := range tc.after {
				require.InDelta(t, float64(p1.Total())/float64(len(tc.after)), float64(per[id]), 0.16*float64(p1.Total())/float64(len(tc.after)), id)
			}
		})
	}

	// Rankings differ from the default space's: a selector's sessions are
	// not all stacked on the default space's owners.
	def, sel := NewFleetIDs("a", "b", "c"), eu("a", "b", "c")
	differ := 0
	for i := range 300 {
		id := fmt.Sprintf("s%d", i)
		if def.Rank(id)[0] != sel.Rank(id)[0] {
			differ++
		}
	}
	require.Greater(t, differ, 150)
	require.Equal(t, "zone=eu", sel.Space())

	// No matching worker: nothing is placed.
	none := eu().Plan(sizes, 0.05)
	require.Equal(t, "", none.Owner(0))
	require.Equal(t, "", none.OwnerOf("s1"))
}
