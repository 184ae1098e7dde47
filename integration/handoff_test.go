package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// TestHandoffWaitsForInFlightPoll checks the overlap the chaos suite found
// at handoffs: a join makes w1 hand sessions to w2 while w1's polls are
// still being served downstream. When w1 cancelled them (closing the
// connection) and released at once, w2 acquired and polled within
// milliseconds while the downstream, which does not watch for
// disconnects, was still serving w1's request: two tokens in flight at
// once for one session, with no fault at all. Now a stopped worker's poll
// finishes under its (still renewed) lease before the lease is released.
func TestHandoffWaitsForInFlightPoll(t *testing.T) {
	rds := startRedis(t)
	admin := rds.Client(t)
	// Each poll takes 1.5s of its 2s interval downstream: a handoff almost
	// always finds one in flight.
	rec := newRecorder(t, admin, 1500*time.Millisecond, true)
	store, err := session.NewStore(admin, keyspace.Space{})
	require.NoError(t, err)
	var ids []string
	for i := range 8 {
		id := fmt.Sprintf("h%d", i)
		ids = append(ids, id)
		require.NoError(t, store.Put(context.Background(), session.Session{ID: id, URL: rec.URL + "/" + id, Interval: session.Duration(2 * time.Second)}))
	}
	startWorker(t, rds.URL(), "w1", chaosFlags...)
	t0 := time.Now()
	require.True(t, assertEventually(10*time.Second, func() bool { return rec.serving() == len(ids) }))
	// w1's polls are now being served; w2 joins and takes about half.
	joined := time.Now()
	startWorker(t, rds.URL(), "w2", chaosFlags...)
	require.True(t, assertEventually(10*time.Second, func() bool {
		return len(rec.polledSince(joined, map[string]bool{"w1": true})) > 0
	}), "w2 polls something")
	hold(2 * time.Second) // let the in-flight polls finish and be recorded
	polls := rec.snapshot()
	t.Logf("w2 joined at %v", joined.Sub(t0).Round(time.Millisecond))
	rep := Check(History{Polls: polls})
	tot := rep.Totals()
	for _, s := range rep.Sessions {
		for _, o := range s.Overlaps {
			t.Logf("overlap %s: %s tok %d [%v,%v] abandoned=%v and %s tok %d [%v,%v]", s.Session,
				o.A.Worker, o.A.Token, o.A.Start.Sub(t0).Round(time.Millisecond), o.A.End.Sub(t0).Round(time.Millisecond), o.A.Abandoned,
				o.B.Worker, o.B.Token, o.B.Start.Sub(t0).Round(time.Millisecond), o.B.End.Sub(t0).Round(time.Millisecond))
		}
	}
	require.Zero(t, tot.Overlaps, "a handoff must not let the successor poll while the predecessor's poll is still served")
}
