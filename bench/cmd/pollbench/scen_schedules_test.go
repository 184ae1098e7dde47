package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSlotSpread checks the schedules scenario's arithmetic on cases whose
// answer is known: every session at second 0 puts all slot starts in one
// 10 ms bucket of 6000 and one second of 60; H spreads them over the
// seconds, and jitter within them.
func TestSlotSpread(t *testing.T) {
	ms10, sec, err := slotSpread(500, spreadCase{expr: "0 * * * * *"})
	require.NoError(t, err)
	require.InDelta(t, 6000, ms10, 1e-9)
	require.InDelta(t, 60, sec, 1e-9)

	hMs10, hSec, err := slotSpread(2_000, spreadCase{expr: "H * * * * *"})
	require.NoError(t, err)
	require.Less(t, hSec, 2.0, "H spreads the sessions over the minute's seconds")
	require.Greater(t, hMs10, 50.0, "without jitter each second's slots start together")

	_, jSec, err := slotSpread(2_000, spreadCase{expr: "H * * * * *", jitter: time.Second})
	require.NoError(t, err)
	require.Less(t, jSec, 2.0)
	jMs10, _, err := slotSpread(2_000, spreadCase{expr: "* * * * * *", jitter: time.Second})
	require.NoError(t, err)
	require.Less(t, jMs10, 3.0, "jitter spreads a slot's starts over the 100 buckets of a second")

	_, _, err = slotSpread(10, spreadCase{expr: "0 0 1 1 *"})
	require.Error(t, err, "no slot in the minute")
}
