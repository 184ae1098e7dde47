package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

// TestReapplyAfterRedisRestartTokensGoUp is issue 11's acceptance run:
// three `pollworker run` processes poll the sessions of a file applied with
// `pollworker sessions apply -f`; the highest token of every session is
// noted; redis-server is killed (SIGKILL) and started again without
// persistence, so it has lost the sessions, the leases and the fencing
// counters; the same file is applied again. Every session must be polled
// again, every acquisition after the restart must have a token greater
// than every token before it (a holder from before may poll on under its
// old lease until its next renewal fails, never alongside a successor:
// the loss quarantine), and no two polls of a session may overlap
// (history.Check).
func TestReapplyAfterRedisRestartTokensGoUp(t *testing.T) {
	redistest.Require(t)
	rds := startRedis(t)
	rec := newRecorder(t, nil, pollHold, false)
	const n = 30
	var b strings.Builder
	b.WriteString("sessions:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - id: re-%02d\n    url: %s/re-%02d\n    interval: %dms\n", i, rec.URL, i, 200*(1+i%5))
	}
	apply := fileApplier(t, rds.URL(), b.String(), n)
	apply()
	for _, id := range []string{"w1", "w2", "w3"} {
		startWorker(t, rds.URL(), id, lossFlags...)
	}
	t0 := time.Now()
	require.Eventually(t, func() bool { return len(rec.polledSince(t0, nil)) == n }, 20*time.Second, 20*time.Millisecond,
		"every session polled")

	before := map[string]int64{}
	for _, p := range rec.snapshot() {
		before[p.Session] = max(before[p.Session], p.Token)
	}
	rds.Restart() // SIGKILL, then a new redis-server without persistence
	restarted := time.Now()
	apply()
	applied := time.Now()
	require.Eventually(t, func() bool { return len(rec.polledSince(applied, nil)) == n }, 30*time.Second, 20*time.Millisecond,
		"every session polled again after the re-apply")
	// A holder from before the restart may poll on under its lease until
	// its next renewal finds the key gone (the same acquisition, the same
	// token); every acquisition after the restart has a greater token.
	var recovery time.Duration
	after := map[string]int64{}
	for _, p := range rec.snapshot() {
		if p.Start.After(applied) {
			require.GreaterOrEqual(t, p.Token, before[p.Session], "session %s: token went back after the restart", p.Session)
			after[p.Session] = max(after[p.Session], p.Token)
		}
	}
	require.Eventually(t, func() bool {
		for _, p := range rec.snapshot() {
			after[p.Session] = max(after[p.Session], p.Token)
		}
		for id, tok := range before {
			if after[id] <= tok {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "every session acquired again after the restart, with a greater token")
	for id, tok := range before {
		var first time.Time
		for _, p := range rec.snapshot() {
			if p.Session == id && p.Token > tok && (first.IsZero() || p.Start.Before(first)) {
				first = p.Start
			}
		}
		recovery = max(recovery, first.Sub(applied))
	}
	t.Logf("restart took %v; every session polled under a new lease within %v of the re-apply (loss quarantine: the lease TTL, %v)",
		applied.Sub(restarted).Round(time.Millisecond), recovery.Round(time.Millisecond), leaseTTL)

	rep := Check(History{Polls: rec.snapshot()})
	tot := rep.Totals()
	require.Zero(t, tot.Overlaps, "overlapping polls")
	require.Zero(t, tot.Stale, "tokens that went back")
	require.Zero(t, tot.SharedTokens, "tokens used by two workers")
}
