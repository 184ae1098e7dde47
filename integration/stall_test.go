package integration

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// TestStoppedWorkerPollsNothingRemovedMeanwhile (rule 7): a worker stopped
// (SIGSTOP) for less than its leases' deadline while a session it holds is
// removed and another paused wakes with both overdue under valid leases.
// Its timer fires late, and no poll starts until it has read the sessions
// again (the stall gate): neither is polled after the commands returned.
// Before, both were polled at once on SIGCONT, 1.5 s after `rm` returned.
func TestStoppedWorkerPollsNothingRemovedMeanwhile(t *testing.T) {
	redistest.Require(t)
	rds := startRedis(t)
	rec := newRecorder(t, nil, 0, false)
	store, err := session.NewStore(rds.Client(t), keyspace.Space{})
	require.NoError(t, err)
	ctx := context.Background()
	ids := []string{"st-rm", "st-pause", "st-a", "st-b"}
	for _, id := range ids {
		require.NoError(t, store.Put(ctx, session.Session{ID: id, URL: rec.URL + "/" + id, Interval: session.Duration(200 * time.Millisecond)}))
	}
	w := startWorker(t, rds.URL(), "w1")
	t0 := time.Now()
	require.Eventually(t, func() bool { return len(rec.polledSince(t0, nil)) == len(ids) }, 30*time.Second, 20*time.Millisecond)

	w.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	require.NoError(t, store.Delete(ctx, "st-rm"))
	require.NoError(t, store.Pause(ctx, "st-pause"))
	returned := time.Now()
	// Stopped past the stall gap (750 ms), within the leases' deadline
	// (TTL 3 s, renewed every second): the leases are still valid when it
	// wakes.
	require.Eventually(t, func() bool { return time.Since(stopped) > 1200*time.Millisecond }, 5*time.Second, 20*time.Millisecond)
	w.signal(t, syscall.SIGCONT)
	woke := time.Now()
	require.Eventually(t, func() bool {
		got := rec.polledSince(woke, nil)
		return got["st-a"] && got["st-b"]
	}, 30*time.Second, 20*time.Millisecond, "the sessions left were not polled again")

	for _, p := range rec.snapshot() {
		if (p.Session == "st-rm" || p.Session == "st-pause") && p.Start.After(returned.Add(time.Second)) {
			t.Errorf("%s polled %v after the command returned (woke %v after)", p.Session,
				p.Start.Sub(returned).Round(time.Millisecond), woke.Sub(returned).Round(time.Millisecond))
		}
	}
	w.mu.Lock()
	log := w.log.String()
	w.mu.Unlock()
	require.Contains(t, log, "stopped or starved", fmt.Sprintf("the worker did not notice its stop (woke %v after the commands)", woke.Sub(returned)))
}
