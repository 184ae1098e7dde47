package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

// TestCheckAndStatusShowTheLossQuarantine: an active session without a
// lease while its slot waits out the loss quarantine (a new keyspace, or
// Redis lost data) is a wait, not a failure: check exits 0 and says so in
// a note, status counts it under loss_quarantine and prints when it ends
// (issue 22 item 4: check said FAIL session-without-lease, exit 3). Without
// a quarantine, or without a live worker, the same session still fails.
func TestCheckAndStatusShowTheLossQuarantine(t *testing.T) {
	f := newExplainFixture(t)
	ctx := ctxT(t)
	marker := keyspace.Space{}.Epoch(0)
	runID := f.explain(t, "s1").Loss.ServerRunID
	require.NotEmpty(t, runID)

	code, r, _ := f.check(t, "--grace", "50ms")
	require.Equal(t, exitUnhealthy, code, "no quarantine: a session without a lease fails")
	require.Contains(t, problemChecks(r), checkNoLease)

	now, err := f.client.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, f.client.Set(ctx, marker, fmt.Sprintf("%s:%d", runID, now.UnixMilli()+60000), 0).Err())
	code, r, stderr := f.check(t, "--grace", "50ms")
	require.Equal(t, exitOK, code, stderr)
	require.True(t, r.OK)
	require.Contains(t, fmt.Sprint(r.Notes), "session-without-lease: not counted: 1 active sessions wait out the loss quarantine (new keyspace or lost data")

	res := runApp(t, "status", "--redis-url", f.url, "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var st clusterStatus
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &st))
	require.Equal(t, 1, st.LossQuarantine.Count)
	require.Greater(t, st.LossQuarantine.LeftMs, int64(50000))
	res = runApp(t, "status", "--redis-url", f.url)
	require.Contains(t, res.stdout, "loss quarantine: 1 active sessions wait out the loss quarantine (new keyspace or lost data")

	// A marker missing: the next acquisition starts one; still a wait.
	require.NoError(t, f.client.Del(ctx, marker).Err())
	code, r, stderr = f.check(t, "--grace", "50ms")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, fmt.Sprint(r.Notes), "starts at the next acquisition")

	// Without a live worker nobody polls it, quarantine or not.
	for _, reg := range f.regs {
		require.NoError(t, reg.Leave(ctx))
	}
	code, r, _ = f.check(t, "--grace", "0")
	require.Equal(t, exitUnhealthy, code)
	require.Contains(t, problemChecks(r), checkNoLease)
}
