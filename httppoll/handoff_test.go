package httppoll

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/results"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// seenRequest is one request a target received.
type seenRequest struct {
	worker, ifNoneMatch, token string
}

// TestStateSurvivesHandoff: two workers on a real Redis, each with its own
// Poller. The first learns the target's ETag and saves it; when it stops,
// the second takes the session over, and its very first request is
// conditional on that ETag (304). When the content changes, the second
// saves the new ETag under its own lease, with a greater token.
func TestStateSurvivesHandoff(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	var (
		mu   sync.Mutex
		seen []seenRequest
		etag = `"v1"`
	)
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, seenRequest{worker: r.Header.Get(HeaderWorker), ifNoneMatch: r.Header.Get("If-None-Match"),
			token: r.Header.Get(HeaderToken)})
		current := etag
		mu.Unlock()
		w.Header().Set("ETag", current)
		if r.Header.Get("If-None-Match") == current {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write([]byte("hello " + current))
	}))
	t.Cleanup(tg.Close)
	requests := func(worker string) []seenRequest {
		mu.Lock()
		defer mu.Unlock()
		var out []seenRequest
		for _, r := range seen {
			if r.worker == worker {
				out = append(out, r)
			}
		}
		return out
	}

	store, err := session.NewStore(client, keys)
	require.NoError(t, err)
	_, err = lease.MarkFresh(ctxT(t), client, keys) // a new Redis: no quarantine to wait out
	require.NoError(t, err)
	require.NoError(t, store.Put(ctxT(t), session.Session{ID: "s1", URL: tg.URL, Interval: session.Duration(50 * time.Millisecond)}))
	states := state.NewStore(client, keys)
	saved := func() (State, state.Record) {
		rec, err := states.Load(ctxT(t), "s1")
		require.NoError(t, err)
		if rec.Data == nil {
			return State{}, rec
		}
		st, err := DecodeState(rec.Data)
		require.NoError(t, err)
		return st, rec
	}

	startWorker := func(id string) (stop func()) {
		p := newPoller(t, Config{Worker: id, Record: results.RecordNone})
		c, err := poller.New(poller.Config{Client: client, ID: id, Poller: p, Stateful: true,
			LeaseTTL: 900 * time.Millisecond, RenewInterval: 150 * time.Millisecond, HeartbeatInterval: 150 * time.Millisecond,
			DiscoveryInterval: 6 * time.Second, OrphanGrace: 400 * time.Millisecond, RequestTimeout: 100 * time.Millisecond,
			DrainTimeout: 2 * time.Second})
		require.NoError(t, err)
		return runStoppable(t, "Coordinator.Run", c.Run)
	}

	stop1 := startWorker("w1")
	require.Eventually(t, func() bool {
		st, _ := saved()
		return st.ETag == `"v1"` && st.Status == http.StatusNotModified && len(requests("w1")) >= 3
	}, 10*time.Second, 5*time.Millisecond)
	w1 := requests("w1")
	require.Empty(t, w1[0].ifNoneMatch, "nothing saved before w1's first poll")
	require.Equal(t, `"v1"`, w1[1].ifNoneMatch, "w1's next polls are conditional")
	_, before := saved()

	startWorker("w2")
	stop1() // a graceful handoff: w2 takes s1 over
	require.Eventually(t, func() bool { return len(requests("w2")) >= 2 }, 10*time.Second, 5*time.Millisecond)
	w2 := requests("w2")
	require.Equal(t, `"v1"`, w2[0].ifNoneMatch, "w2's first request uses the ETag w1 saved")
	require.Equal(t, `"v1"`, w2[1].ifNoneMatch)
	st, rec := saved()
	require.Equal(t, "w1", st.Worker, "304s like w1's change nothing: a handoff costs no write")
	require.Equal(t, before.Token, rec.Token)

	mu.Lock()
	etag = `"v2"`
	mu.Unlock()
	require.Eventually(t, func() bool { st, _ := saved(); return st.ETag == `"v2"` }, 10*time.Second, 5*time.Millisecond)
	st, after := saved()
	require.Equal(t, "w2", st.Worker)
	require.Equal(t, http.StatusOK, st.Status)
	require.Equal(t, sha256Hex(`hello "v2"`), st.BodySHA256)
	require.Greater(t, after.Token, before.Token, "saved under w2's lease, whose token is greater")
	require.Equal(t, w2[0].token, strconv.FormatInt(after.Token, 10))
	require.Eventually(t, func() bool {
		r := requests("w2")
		return r[len(r)-1].ifNoneMatch == `"v2"`
	}, 10*time.Second, 5*time.Millisecond)
}
