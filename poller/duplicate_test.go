package poller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/nodes"
)

// TestSecondWorkerWithTheSameIDStops is issue 10 item 5 in the library: a
// second coordinator started with a live worker's id stops with
// nodes.ErrDuplicateID and never polls, and the first keeps its sessions.
func TestSecondWorkerWithTheSameIDStops(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 10, 50*time.Millisecond)
	rec := newRecorder()
	first := start(t, fastConfig(client, "dup", rec.poller("first")))
	require.Eventually(t, func() bool { return len(first.c.Status().Owned) == len(ids) }, 10*time.Second, 10*time.Millisecond)

	second := start(t, fastConfig(client, "dup", rec.poller("second")))
	select {
	case <-second.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the second worker with the same id kept running")
	}
	require.ErrorIs(t, second.err, nodes.ErrDuplicateID)
	for _, id := range ids {
		require.NotEqual(t, "second", rec.lastPoller()[id])
	}
	// The first keeps its sessions: it holds them all and is ready (a
	// starved renewal on a loaded machine may drop them for a moment; the
	// second never polled, checked above).
	require.Eventually(t, func() bool { return len(first.c.Status().Owned) == len(ids) && first.c.Ready() },
		10*time.Second, 10*time.Millisecond, "the first keeps its sessions")
	first.stop(t)
	rec.check(t)
}

// TestRestartedWorkerTakesItsIDBack: a coordinator started under the id
// of a process that crashed (its heartbeat entry, of another incarnation,
// is not renewed) waits for that entry to expire and then polls, instead
// of stopping with nodes.ErrDuplicateID at once (an embedder restarted by
// its supervisor under the same hostname crash-looped for a heartbeat TTL).
func TestRestartedWorkerTakesItsIDBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 4, 50*time.Millisecond)
	crashed, err := nodes.New(nodes.Config{Client: client, ID: "again", TTL: 600 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, crashed.Heartbeat(t.Context())) // its claim, never renewed: the process died

	rec := newRecorder()
	w := start(t, fastConfig(client, "again", rec.poller("again")))
	require.Eventually(t, func() bool { return len(w.c.Status().Owned) == len(ids) }, 10*time.Second, 10*time.Millisecond,
		"the restarted worker takes its id back once the crashed one's claim expired")
	select {
	case <-w.done:
		t.Fatalf("Run returned: %v", w.err)
	default:
	}
	w.stop(t)
	rec.check(t)
}
