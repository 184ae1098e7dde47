package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLimitLoop runs the e2e scenario's limit loop in-process against the
// target for a few intervals: every session is polled once per interval,
// on its hashed phase, so no 10 ms slot holds a clump.
func TestLimitLoop(t *testing.T) {
	tg, err := startTarget()
	require.NoError(t, err)
	defer tg.close()
	const n, iv = 40, 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*iv+iv/2)
	defer cancel()
	require.NoError(t, runLimit(ctx, limitConfig{IDs: e2eIDs("t", n), URLPrefix: tg.urlPrefix(), Interval: iv, Worker: "limit"}))
	require.Equal(t, n, tg.polled(0, "limit"))
	st := analyze(tg.since(0), iv, 2*iv, 5*iv, iv)
	require.InDelta(t, float64(n)/iv.Seconds(), st.perSec, 0.15*float64(n)/iv.Seconds())
	require.Less(t, st.lateP99, 20.0, "ms")
	require.Less(t, st.busiestSlot, 6.0) // 40 polls over 20 slots: spread, not one clump
}
