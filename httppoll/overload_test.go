package httppoll

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/results"
	"github.com/pollworker/pollworker/session"
)

// TestHostLimitedWorkerNeitherFailsNorBacksOff: one worker whose sessions
// are due twice what the per-host bound lets it run (20 sessions at 2 s, a
// target holding each request 200 ms, MaxPerHost 1: 5 polls/s of 10) is
// behind, and its polls waiting for the host are no failures: no poll
// error, no session backing off. Before, each poll waited for a slot
// inside Poll for half its timeout, then failed; sessions went into error
// backoff and the worker never said it was behind. The Poller is used
// without saved state (plainPoller), so that a state load slowed by a
// loaded machine cannot fail a poll; a request has 10 times its 200 ms.
func TestHostLimitedWorkerNeitherFailsNorBacksOff(t *testing.T) {
	client := redistest.Start(t).Client(t)
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(200 * time.Millisecond):
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(tg.Close)
	store, err := session.NewStore(client, keys)
	require.NoError(t, err)
	_, err = lease.MarkFresh(ctxT(t), client, keys)
	require.NoError(t, err)
	for i := range 20 {
		require.NoError(t, store.Put(ctxT(t), session.Session{ID: fmt.Sprintf("s%02d", i), URL: tg.URL, Interval: session.Duration(2 * time.Second)}))
	}
	failures := &failureRecord{}
	p := newPoller(t, Config{Worker: "w1", Record: results.RecordNone, MaxPerHost: 1, Failures: failures})
	c, err := poller.New(poller.Config{Client: client, ID: "w1", Poller: p,
		LeaseTTL: 900 * time.Millisecond, RenewInterval: 150 * time.Millisecond, HeartbeatInterval: 150 * time.Millisecond,
		DiscoveryInterval: 6 * time.Second, OrphanGrace: 400 * time.Millisecond, RequestTimeout: 100 * time.Millisecond,
		DrainTimeout: 2 * time.Second, KeepWeightWhenBehind: true})
	require.NoError(t, err)
	runStoppable(t, "Coordinator.Run", c.Run)

	require.Eventually(t, func() bool { return c.PollStats().Behind }, 20*time.Second, 10*time.Millisecond,
		"a worker running half the polls due is behind")
	require.Eventually(t, func() bool { return c.Status().Polls >= 40 }, 20*time.Second, 10*time.Millisecond)
	st := c.Status()
	require.Zero(t, st.PollErrors, "waiting for a host slot is no poll error")
	require.Zero(t, st.Backoff, "nor a reason to back off")
	require.Zero(t, p.Stats().Polls[OutcomeTimeout])
	require.Empty(t, failures.failing())
}
