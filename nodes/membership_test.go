package nodes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMembershipContains(t *testing.T) {
	m := Membership{Nodes: []string{"a", "c", "e"}}
	for _, id := range []string{"a", "c", "e"} {
		require.True(t, m.Contains(id), id)
	}
	for _, id := range []string{"", "b", "f", "A"} {
		require.False(t, m.Contains(id), id)
	}
	require.False(t, Membership{}.Contains("a"))
	require.Equal(t, 3, m.Len())
}

func TestMembershipNextExpiry(t *testing.T) {
	tests := []struct {
		name   string
		give   Membership
		want   time.Duration
		wantOK bool
	}{
		{name: "empty", give: Membership{ServerTimeMs: 1000}},
		{name: "one", give: Membership{Nodes: []string{"a"}, ExpiryMs: []int64{1500}, ServerTimeMs: 1000},
			want: 501 * time.Millisecond, wantOK: true},
		{name: "earliest wins", give: Membership{Nodes: []string{"a", "b", "c"}, ExpiryMs: []int64{3000, 1200, 2000}, ServerTimeMs: 1000},
			want: 201 * time.Millisecond, wantOK: true},
		{name: "expiring now", give: Membership{Nodes: []string{"a"}, ExpiryMs: []int64{1000}, ServerTimeMs: 1000},
			want: time.Millisecond, wantOK: true},
		{name: "past clamps to zero", give: Membership{Nodes: []string{"a"}, ExpiryMs: []int64{900}, ServerTimeMs: 1000},
			want: 0, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.give.NextExpiry()
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestCordonsSuspendedWhenEveryNodeIsCordoned: cordoning every live
// worker left the sessions the last ones released unpolled until an
// uncordon; with every live node cordoned, the cordons count for nothing.
func TestCordonsSuspendedWhenEveryNodeIsCordoned(t *testing.T) {
	tests := []struct {
		name           string
		nodes, cordon  []string
		placeable      []string
		suspended, isA bool
	}{
		{"none cordoned", []string{"a", "b"}, nil, []string{"a", "b"}, false, false},
		{"one of two", []string{"a", "b"}, []string{"a"}, []string{"b"}, false, true},
		{"every one", []string{"a", "b"}, []string{"a", "b"}, []string{"a", "b"}, true, false},
		{"the only one", []string{"a"}, []string{"a"}, []string{"a"}, true, false},
		{"no live node", nil, nil, nil, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Membership{Nodes: tt.nodes, Cordoned: tt.cordon}
			require.Equal(t, tt.placeable, m.Placeable())
			require.Equal(t, tt.suspended, m.CordonsSuspended())
			require.Equal(t, tt.isA, m.IsCordoned("a"))
		})
	}
}
