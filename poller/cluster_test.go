package poller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// TestRedisClusterConvergesAndHandsOff runs two workers against a real
// three-master Redis Cluster: leases of one session share a slot, renewal
// and acquisition batch by slot, membership and the session index work.
func TestRedisClusterConvergesAndHandsOff(t *testing.T) {
	t0 := time.Now()
	cluster := redistest.StartCluster(t, 3)
	t.Logf("cluster up in %v", time.Since(t0).Round(time.Millisecond))
	client := cluster.Client(t)
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	var ids []string
	for i := range 60 {
		id := fmt.Sprintf("session-%d", i)
		ids = append(ids, id)
		require.NoError(t, store.Put(context.Background(), session.Session{ID: id, URL: "http://127.0.0.1:1/", Interval: session.Duration(50 * time.Millisecond)}))
	}
	rec := newRecorder()
	a := start(t, fastConfig(client, "a", rec.poller("a")))
	start(t, fastConfig(client, "b", rec.poller("b")))

	inspect := func() map[string]string {
		hs, err := lease.Inspect(context.Background(), client, keyspace.Space{}, ids, 0)
		require.NoError(t, err)
		out := map[string]string{}
		for _, h := range hs {
			if h.Owner != "" {
				out[h.Session] = lease.HolderOf(h.Owner)
			}
		}
		return out
	}
	require.Eventually(t, func() bool {
		own := inspect()
		per := map[string]int{}
		for _, w := range own {
			per[w]++
		}
		return len(own) == len(ids) && per["a"] > 20 && per["b"] > 20
	}, 15*time.Second, 20*time.Millisecond)
	t.Logf("converged after %v", time.Since(t0).Round(time.Millisecond))
	// Renewals keep working across slots for a few cycles.
	require.Eventually(t, func() bool { return len(a.c.Status().Owned) > 20 && a.c.Ready() }, 5*time.Second, 20*time.Millisecond)

	a.stop(t)
	require.Eventually(t, func() bool {
		own := inspect()
		for _, id := range ids {
			if own[id] != "b" {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
	t.Logf("handed off after %v", time.Since(t0).Round(time.Millisecond))
	rec.check(t)
}
