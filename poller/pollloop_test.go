package poller

import (
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
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
			q.push(l, base)
			in = append(in, l)
			if i%7 == 3 { // remove one at random
				j := rng.IntN(len(in))
				require.Same(t, in[j], q.remove(in[j].index))
				require.Equal(t, -1, in[j].index)
				in = append(in[:j], in[j+1:]...)
			}
			for k, e := range q.entries {
				if k != e.l.index { // require only on failure: it is slow under -race, and this runs 10,000 times
					require.Equal(t, k, e.l.index, "round %d", round)
				}
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

// BenchmarkDueQueue pops the first of n queued loops and pushes it back
// one interval later, as the scheduler does for each poll; the loops are
// allocated apart, as a worker's are, so that a loop is rarely in cache.
func BenchmarkDueQueue(b *testing.B) {
	for _, n := range []int{1000, 20000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			base := time.Now()
			rng := rand.New(rand.NewPCG(1, 2))
			var q dueQueue
			pad := make([][]byte, 0, n)
			for range n {
				pad = append(pad, make([]byte, 1024)) // spread the loops over memory
				l := &pollLoop{rank: base.Add(time.Duration(rng.IntN(int(time.Second))))}
				q.push(l, base)
			}
			b.ResetTimer()
			for range b.N {
				l := q.pop()
				now := l.rank // popped when due
				l.rank = now.Add(time.Second)
				q.push(l, now)
			}
			runtime.KeepAlive(pad)
		})
	}
}

// TestDueQueueKeysWallOnlyTimesByTheirDistance: a time without a monotonic
// reading (a cron slot's start) is ordered by its distance from now among
// times that have one.
func TestDueQueueKeysWallOnlyTimesByTheirDistance(t *testing.T) {
	now := time.Now()
	var q dueQueue
	early := &pollLoop{rank: now.Add(500 * time.Millisecond)}
	late := &pollLoop{rank: now.Add(2 * time.Second)}
	slot := &pollLoop{rank: now.Add(time.Second).Round(0)} // wall clock only
	require.Contains(t, now.String(), " m=+", "the premise: now has a monotonic reading")
	require.NotContains(t, slot.rank.String(), " m=", "the premise: the slot has none")
	q.push(late, now)
	q.push(slot, now)
	q.push(early, now)
	require.Same(t, early, q.pop())
	require.Same(t, slot, q.pop())
	require.Same(t, late, q.pop())
}
