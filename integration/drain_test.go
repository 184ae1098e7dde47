package integration

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// TestDrainAndUncordonALiveWorker is issue 15's acceptance run for
// cordon/drain: three `pollworker run` processes; `pollworker drain w2`
// makes w2 hand off everything (it holds no lease within a second), its
// sessions are polled by the others with no overlap, and w2 stays ready;
// `pollworker uncordon w2` gives it its share back.
func TestDrainAndUncordonALiveWorker(t *testing.T) {
	redistest.Require(t)
	rds := startRedis(t)
	admin := redistest.Client(t, rds.URL())
	rec := newRecorder(t, nil, pollHold, false)
	store, err := session.NewStore(admin, keyspace.Space{})
	require.NoError(t, err)
	var ids []string
	for i := range 60 {
		id := fmt.Sprintf("dr-%02d", i)
		ids = append(ids, id)
		require.NoError(t, store.Put(context.Background(), session.Session{ID: id, URL: rec.URL + "/" + id, Interval: session.Duration(300 * time.Millisecond)}))
	}
	ready := map[string]string{}
	for _, id := range []string{"w1", "w2", "w3"} {
		addr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
		startWorker(t, rds.URL(), id, append(append([]string(nil), lossFlags...), "--http-addr", addr)...)
		ready[id] = "http://" + addr + "/readyz"
	}
	held := func(worker string) int {
		hs, err := lease.Inspect(context.Background(), admin, keyspace.Space{}, ids, 0)
		require.NoError(t, err)
		n := 0
		for _, h := range hs {
			if lease.HolderOf(h.Owner) == worker {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return held("w1")+held("w2")+held("w3") == len(ids) && held("w2") > 0 }, 20*time.Second, 20*time.Millisecond)

	out, err := pollworker(t, "drain", "--redis-url", rds.URL(), "--wait", "--timeout", "5s", "w2")
	require.NoError(t, err, out)
	t.Log(out)
	drained := time.Now()
	require.Zero(t, held("w2"))
	require.Eventually(t, func() bool { return held("w1")+held("w3") == len(ids) }, 5*time.Second, 20*time.Millisecond,
		"the others take every session")
	require.Eventually(t, func() bool { return len(rec.polledSince(drained, nil)) == len(ids) }, 5*time.Second, 20*time.Millisecond)
	resp, err := http.Get(ready["w2"])
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "a cordoned worker stays ready")
	status, err := pollworker(t, "status", "--redis-url", rds.URL())
	require.NoError(t, err, status)
	require.Contains(t, status, "cordoned (take no sessions; pollworker uncordon ID): w2")

	out, err = pollworker(t, "uncordon", "--redis-url", rds.URL(), "w2")
	require.NoError(t, err, out)
	require.Eventually(t, func() bool { return held("w2") > 0 }, 10*time.Second, 20*time.Millisecond, "w2 takes its share back")

	rep := Check(History{Polls: rec.snapshot()})
	tot := rep.Totals()
	require.Zero(t, tot.Overlaps, "overlapping polls")
	require.Zero(t, tot.Stale, "tokens that went back")
	require.Zero(t, tot.SharedTokens, "tokens used by two workers")

	// Refusals: a worker that is not live, a live one for forget.
	out, err = pollworker(t, "drain", "--redis-url", rds.URL(), "nosuch")
	require.Error(t, err)
	require.Contains(t, out, "no live worker has this id")
	out, err = pollworker(t, "forget", "--redis-url", rds.URL(), "w3")
	require.Error(t, err)
	require.Contains(t, out, "still heartbeats")
}
