package poller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/nodes"
)

// TestSheddingSteps: the fraction drops by shedStep per whole span behind,
// not below shedFloor, and climbs by recoverStep per recoverSpans spans
// without being behind; a stretch of either is timed from its start.
func TestSheddingSteps(t *testing.T) {
	const span = 30 * time.Second
	t0 := time.Unix(1000, 0)
	var s shedding
	at := func(d time.Duration, behind bool) (float64, bool) { return s.step(t0.Add(d), behind, true, span) }

	f, changed := at(0, false)
	require.Equal(t, 1.0, f)
	require.False(t, changed)
	f, changed = at(5*time.Second, true) // behind begins
	require.False(t, changed)
	f, changed = at(5*time.Second+span-time.Millisecond, true)
	require.False(t, changed, "not a whole span behind yet")
	f, changed = at(5*time.Second+span, true)
	require.True(t, changed)
	require.Equal(t, shedStep, f)
	for i := 2; i <= 10; i++ {
		f, _ = at(5*time.Second+time.Duration(i)*span, true)
	}
	require.Equal(t, shedFloor, f, "never below the floor")
	_, changed = at(5*time.Second+11*span, true)
	require.False(t, changed, "at the floor: nothing more to shed")

	// Caught up at 400 s: one step back per recoverSpans spans.
	f, changed = at(400*time.Second, false)
	require.False(t, changed)
	f, changed = at(400*time.Second+recoverSpans*span-time.Second, false)
	require.False(t, changed)
	f, changed = at(400*time.Second+recoverSpans*span, false)
	require.True(t, changed)
	require.InDelta(t, shedFloor+recoverStep, f, 1e-9)

	// Behind again for less than a span, then keeping up: the recovery
	// restarts from the end of that stretch.
	at(400*time.Second+recoverSpans*span+time.Second, true)
	f, changed = at(400*time.Second+recoverSpans*span+10*time.Second, false)
	require.False(t, changed)
	require.InDelta(t, shedFloor+recoverStep, f, 1e-9, "a short stretch behind sheds nothing")
	f, changed = at(400*time.Second+2*recoverSpans*span+10*time.Second, false)
	require.True(t, changed)
	require.InDelta(t, shedFloor+2*recoverStep, f, 1e-9)
	for i := 3; i < 12; i++ {
		f, _ = at(400*time.Second+time.Duration(i)*recoverSpans*span+10*time.Second, false)
	}
	require.Equal(t, 1.0, f, "never above the whole weight")
}

// TestPeersWithRoom: shedding moves load only while some other placeable
// worker keeps up; a worker whose info is not read yet counts as having
// room (it just started), this worker's own info and infos of workers not
// placeable (cordoned, drained) do not count.
func TestPeersWithRoom(t *testing.T) {
	behind := func(id string) nodes.Info { return nodes.Info{ID: id, Behind: "host-limit"} }
	keeps := func(id string) nodes.Info { return nodes.Info{ID: id} }
	tests := []struct {
		name      string
		placeable []string
		infos     []nodes.Info
		want      bool
	}{
		{"alone", []string{"me"}, []nodes.Info{keeps("me")}, false},
		{"a peer keeps up", []string{"me", "a", "b"}, []nodes.Info{behind("me"), behind("a"), keeps("b")}, true},
		{"every peer behind", []string{"me", "a", "b"}, []nodes.Info{behind("me"), behind("a"), behind("b")}, false},
		{"a peer without an info yet", []string{"me", "a"}, []nodes.Info{behind("me")}, true},
		{"the peer that keeps up is not placeable (drained)", []string{"me", "a"}, []nodes.Info{behind("me"), behind("a"), keeps("drained")}, false},
		{"my own info does not count", []string{"me", "a"}, []nodes.Info{keeps("me"), behind("a")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, peersWithRoom("me", tt.placeable, tt.infos))
		})
	}
}

// TestSheddingWaitsForAPeerWithRoom: behind for many spans while every
// peer is behind too, nothing is shed; once a peer has room, the next
// step sheds at once (the worker has been behind a whole span already).
func TestSheddingWaitsForAPeerWithRoom(t *testing.T) {
	const span = 30 * time.Second
	t0 := time.Unix(1000, 0)
	var s shedding
	s.step(t0, true, false, span)
	for i := 1; i <= 5; i++ {
		f, changed := s.step(t0.Add(time.Duration(i)*span), true, false, span)
		require.False(t, changed)
		require.Equal(t, 1.0, f)
	}
	f, changed := s.step(t0.Add(5*span+time.Second), true, true, span)
	require.True(t, changed)
	require.Equal(t, shedStep, f)
}
