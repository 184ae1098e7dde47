package history

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHolders(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	changes := []LeaseChange{
		{At: at(0), Session: "a", Worker: "w1", Held: true},
		{At: at(0), Session: "b", Worker: "w1", Held: true},
		{At: at(100), Session: "a", Worker: "w1", Held: false}, // released
		{At: at(150), Session: "a", Worker: "w2", Held: true},  // taken over
		{At: at(200), Session: "b", Worker: "w2", Held: true},  // acquired before w1's release was reported
		{At: at(210), Session: "b", Worker: "w1", Held: false}, // that late release keeps w2
		{At: at(300), Session: "a", Worker: "w2", Held: false},
	}
	tests := []struct {
		name string
		give int // ms
		want map[string]string
	}{
		{name: "before anything", give: -1, want: map[string]string{}},
		{name: "at a change, which counts", give: 0, want: map[string]string{"a": "w1", "b": "w1"}},
		{name: "between release and acquire", give: 120, want: map[string]string{"b": "w1"}},
		{name: "a late release does not erase the new holder", give: 250, want: map[string]string{"a": "w2", "b": "w2"}},
		{name: "after the last release", give: 1000, want: map[string]string{"b": "w2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Holders(changes, at(tt.give)))
		})
	}

	var h Holding
	require.Empty(t, h.Map())
	require.Empty(t, h.Counts())
	for _, c := range changes[:5] {
		h.Apply(c)
	}
	require.Equal(t, Holders(changes, at(200)), h.Map(), "Holding is Holders change by change")
	require.Equal(t, map[string]int{"w2": 2}, h.Counts())
}
