package poller

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDueQueueOrder: a dueQueue pops by rank, ties to the loop whose last
// poll began first (never before ever), and keeps every loop's index, under
// random pushes and removals.
func TestDueQueueOrder(t *testing.T) {
	base := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		var q dueQueue
		var in []*pollLoop
		for i := range 200 {
			l := &pollLoop{rank: base.Add(time.Duration(rng.IntN(20)) * time.Millisecond)}
			if rng.IntN(4) > 0 {
				l.lastBegan = base.Add(-time.Duration(rng.IntN(5)) * time.Second)
			}
			q.push(l)
			in = append(in, l)
			if i%7 == 3 { // remove one at random
				j := rng.IntN(len(in))
				require.Same(t, in[j], q.remove(in[j].index))
				require.Equal(t, -1, in[j].index)
				in = append(in[:j], in[j+1:]...)
			}
			for k, e := range q {
				require.Equal(t, k, e.l.index, "round %d", round)
			}
		}
		sort.SliceStable(in, func(i, j int) bool {
			if !in[i].rank.Equal(in[j].rank) {
				return in[i].rank.Before(in[j].rank)
			}
			return in[i].lastBegan.Before(in[j].lastBegan)
		})
		for _, want := range in {
			got := q.pop()
			require.True(t, got.rank.Equal(want.rank) && got.lastBegan.Equal(want.lastBegan),
				"round %d: popped rank %v began %v, want rank %v began %v", round, got.rank, got.lastBegan, want.rank, want.lastBegan)
		}
		require.Zero(t, q.Len())
	}
}
