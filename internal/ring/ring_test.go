package ring

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRing: a Ring keeps the last Size elements pushed, says when one was
// dropped, lists them newest first without removing them and drains them
// oldest first.
func TestRing(t *testing.T) {
	for _, tc := range []struct {
		size         int
		push         string
		dropped      int
		newest, left string // Newest, then Drain (oldest first)
	}{
		{size: 2},
		{size: 2, push: "a", newest: "a", left: "a"},
		{size: 2, push: "abc", dropped: 1, newest: "cb", left: "bc"},
		{size: 3, push: "abcdefgh", dropped: 5, newest: "hgf", left: "fgh"}, // wrapped more than once
		{size: 1, push: "ab", dropped: 1, newest: "b", left: "b"},
		{size: 0, push: "ab", dropped: 2},
		{size: -1, push: "a", dropped: 1},
	} {
		r := New[string](tc.size)
		dropped := 0
		for _, c := range tc.push {
			if r.Push(string(c)) {
				dropped++
			}
		}
		require.Equal(t, tc.dropped, dropped, "size %d, push %q", tc.size, tc.push)
		require.Equal(t, len(tc.left), r.Len())
		join := func(ss []string) (s string) {
			for _, e := range ss {
				s += e
			}
			return s
		}
		require.Equal(t, tc.newest, join(r.Newest(nil)), "size %d, push %q", tc.size, tc.push)
		require.Equal(t, tc.left, join(r.Drain(nil)), "size %d, push %q", tc.size, tc.push)
		require.Zero(t, r.Len())
		require.Empty(t, r.Drain(nil))
		if tc.size > 0 {
			require.False(t, r.Push("z"), "room again after a drain")
		}
	}
}
