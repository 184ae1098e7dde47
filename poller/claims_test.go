package poller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestOrphanWatchBeginsGraceAfterTheShareIsHeld: the orphan watch (the
// watched buckets' reads and the scans for free leases) begins OrphanGrace
// after the worker first held its share, not at a fixed time after its
// first round: rounds alone, however long, never start it; a second
// shareHeld does not move it.
func TestOrphanWatchBeginsGraceAfterTheShareIsHeld(t *testing.T) {
	const grace = 20 * time.Second
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	cl := newClaims(clk, func() {}, grace)

	for range 10 { // a slow start: rounds for 10 × OrphanGrace, share not held yet
		cl.startRound()
		require.False(t, cl.watching(clk.Now()))
		require.False(t, cl.orphanScanDue(clk.Now(), 50))
		clk.Step(grace)
	}

	held := clk.Now()
	cl.shareHeld(held)
	clk.Step(grace - time.Millisecond)
	cl.shareHeld(clk.Now()) // readiness stays: the first time counts
	require.False(t, cl.watching(clk.Now()))
	require.False(t, cl.orphanScanDue(clk.Now(), 50))

	clk.SetTime(held.Add(grace))
	require.True(t, cl.watching(clk.Now()))
	require.True(t, cl.orphanScanDue(clk.Now(), 50))
	require.False(t, cl.orphanScanDue(clk.Now(), 1), "never with one worker")
}
