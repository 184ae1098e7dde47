package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// TestRollingReplacementAsKubernetesDoes is issue 15 item 6's acceptance
// run: 5 workers, 2000 sessions every 200 ms (400 under -race), each worker replaced in turn
// as a Deployment's rolling update does (SIGTERM the old one, start the new
// one, wait for its /readyz, go on with the next). No session may go
// unpolled for more than a second, and no two polls of a session overlap.
func TestRollingReplacementAsKubernetesDoes(t *testing.T) {
	redistest.Require(t)
	if testing.Short() {
		t.Skip("a rolling update of 5 workers")
	}
	rds := startRedis(t)
	admin := redistest.Client(t, rds.URL())
	rec := newRecorder(t, nil, 10*time.Millisecond, false)
	store, err := session.NewStore(admin, keyspace.Space{})
	require.NoError(t, err)
	n := 2000
	if raceDetector {
		// Under -race the 2 cores cannot poll 10,000 times a second and
		// renew too: starved renewals, not the handoffs, would fail it.
		n = 400
	}
	var all []session.Session
	for i := range n {
		id := fmt.Sprintf("ro-%04d", i)
		all = append(all, session.Session{ID: id, URL: rec.URL + "/" + id, Interval: session.Duration(200 * time.Millisecond)})
	}
	require.NoError(t, store.PutMany(context.Background(), all))

	type pod struct {
		w     *worker
		ready string
	}
	startPod := func(id string) pod {
		addr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
		return pod{w: startWorker(t, rds.URL(), id, "--http-addr", addr), ready: "http://" + addr + "/readyz"}
	}
	waitReady := func(p pod) time.Duration {
		start := time.Now()
		require.Eventually(t, func() bool {
			resp, err := http.Get(p.ready)
			if err != nil {
				return false
			}
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 30*time.Second, 20*time.Millisecond, "%s never became ready", p.w.id)
		return time.Since(start)
	}
	var pods []pod
	for i := range 5 {
		pods = append(pods, startPod(fmt.Sprintf("old-%d", i)))
	}
	for _, p := range pods {
		waitReady(p)
	}
	t0 := time.Now()
	require.Eventually(t, func() bool { return len(rec.polledSince(t0, nil)) == n }, 30*time.Second, 50*time.Millisecond)

	from := time.Now()
	for i, old := range pods {
		old.w.signal(t, syscall.SIGTERM)
		require.NoError(t, old.w.wait(t, 15*time.Second))
		pods[i] = startPod(fmt.Sprintf("new-%d", i))
		took := waitReady(pods[i])
		t.Logf("replaced %s by %s; ready after %v", old.w.id, pods[i].w.id, took.Round(time.Millisecond))
	}
	to := time.Now()
	require.Eventually(t, func() bool { return len(rec.polledSince(to, nil)) == n }, 10*time.Second, 50*time.Millisecond)

	// The longest time any session went unpolled during the rollout.
	starts := map[string][]time.Time{}
	for _, p := range rec.snapshot() {
		starts[p.Session] = append(starts[p.Session], p.Start)
	}
	var worst time.Duration
	var worstID string
	for id, ts := range starts {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(ts); i++ {
			if ts[i].Before(from) || ts[i-1].After(to) {
				continue
			}
			if gap := ts[i].Sub(ts[i-1]); gap > worst {
				worst, worstID = gap, id
			}
		}
	}
	t.Logf("rollout of 5 workers took %v; the longest unpolled time of a session was %v (%s)", to.Sub(from).Round(time.Millisecond),
		worst.Round(time.Millisecond), worstID)
	if worst > time.Second {
		for _, p := range rec.snapshot() {
			if p.Session == worstID {
				t.Logf("  %s %s token %d at %v", p.Session, p.Worker, p.Token, p.Start.Sub(from).Round(time.Millisecond))
			}
		}
	}
	require.LessOrEqual(t, worst, time.Second, "a session went unpolled for more than a second")
	tot := Check(History{Polls: rec.snapshot()}).Totals()
	require.Zero(t, tot.Overlaps, "overlapping polls")
	require.Zero(t, tot.Stale, "tokens that went back")
	require.Zero(t, tot.SharedTokens, "tokens used by two workers")
}
