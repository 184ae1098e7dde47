package poller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

// TestNewWorkerIsReadyOnceItHoldsItsShare is issue 15 item 6: a worker
// that joins a running fleet turns ready only once it holds the sessions
// the plan gives it (handed over by the others), so that a rolling update
// that waits for readiness replaces the next worker only then. Before,
// Ready was true at the first heartbeat, holding nothing.
func TestNewWorkerIsReadyOnceItHoldsItsShare(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 60, 100*time.Millisecond)
	rec := newRecorder()
	w1 := start(t, fastConfig(client, "w1", rec.poller("w1")))
	require.Eventually(t, func() bool { return len(w1.c.Status().Owned) == len(ids) && w1.c.Ready() }, 10*time.Second, 5*time.Millisecond)

	planned := 0
	for _, o := range plannedOwners([]string{"w1", "w2"}, ids, 100*time.Millisecond) {
		if o == "w2" {
			planned++
		}
	}
	require.Positive(t, planned)
	w2 := start(t, fastConfig(client, "w2", rec.poller("w2")))
	owned := -1
	require.Eventually(t, func() bool {
		if !w2.c.Ready() { // sampled as a readiness probe would
			return false
		}
		owned = len(w2.c.Status().Owned)
		return true
	}, 30*time.Second, time.Millisecond, "w2 never became ready") // seconds under -race on a loaded machine
	require.Equal(t, planned, owned, "ready only with its share")
	rec.check(t)
}
