package poller

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// TestApplyAssignment: a bucket that stops being assigned here keeps only
// the definitions of the sessions polled here, as a read of a watched
// bucket does; before, the others stayed and counted as pending for good
// (pollworker_sessions{state="pending"} stuck above 0 after a fleet
// started together, each worker holding exactly its share).
func TestApplyAssignment(t *testing.T) {
	// Two sessions of one bucket, two of another.
	byBucket := map[int][]string{}
	for i := range 10000 {
		id := fmt.Sprintf("s%d", i)
		byBucket[keyspace.BucketOf(id)] = append(byBucket[keyspace.BucketOf(id)], id)
	}
	idsOf := map[int][]string{}
	for _, b := range slices.Sorted(maps.Keys(byBucket)) {
		if len(byBucket[b]) >= 2 && len(idsOf) < 2 {
			idsOf[b] = byBucket[b][:2]
		}
	}
	require.Len(t, idsOf, 2)
	buckets := slices.Sorted(maps.Keys(idsOf))
	b0, b1 := buckets[0], buckets[1]
	polled := idsOf[b0][0] // held here

	tests := []struct {
		name string
		want map[int]bool
		defs []string // definitions kept after
	}{
		{"unchanged", map[int]bool{b0: true, b1: true}, []string{idsOf[b0][0], idsOf[b0][1], idsOf[b1][0], idsOf[b1][1]}},
		{"assigned to watched", map[int]bool{b0: false, b1: true}, []string{polled, idsOf[b1][0], idsOf[b1][1]}},
		{"no longer read", map[int]bool{b1: true}, []string{polled, idsOf[b1][0], idsOf[b1][1]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &view{buckets: map[int]*bucket{}, sessions: map[string]*session.Session{}, held: map[string]*hold{}}
			for b, ids := range idsOf {
				v.buckets[b] = &bucket{assigned: true, loaded: true, ids: ids}
				for _, id := range ids {
					v.sessions[id] = &session.Session{ID: id}
				}
			}
			v.held[polled] = &hold{sess: v.sessions[polled]}
			v.applyAssignment(tt.want)
			require.ElementsMatch(t, tt.defs, slices.Collect(maps.Keys(v.sessions)))
			require.Len(t, v.buckets, len(tt.want))
			for b, assigned := range tt.want {
				require.Equal(t, assigned, v.buckets[b].assigned)
			}
		})
	}
	t.Run("watched to assigned is read again", func(t *testing.T) {
		v := &view{buckets: map[int]*bucket{b0: {loaded: true, ids: idsOf[b0]}}, sessions: map[string]*session.Session{}, held: map[string]*hold{}}
		v.applyAssignment(map[int]bool{b0: true})
		require.False(t, v.buckets[b0].loaded)
		require.True(t, v.buckets[b0].assigned)
	})
	t.Run("a new bucket starts from the sessions polled here", func(t *testing.T) {
		v := &view{buckets: map[int]*bucket{}, sessions: map[string]*session.Session{polled: {ID: polled}}, held: map[string]*hold{polled: {}}}
		v.applyAssignment(map[int]bool{b0: true})
		require.Equal(t, []string{polled}, v.buckets[b0].ids)
		require.False(t, v.buckets[b0].loaded)
	})
}
