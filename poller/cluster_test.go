package poller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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

// TestRedisClusterReshardIsNotALoss reshards under load: while two workers
// poll, the slots of a third of the sessions move to other masters (their
// loss markers move with them, naming the old masters); then a worker
// drains, and its peer takes every session at once: no loss quarantine
// (here a minute) although the markers name other servers.
func TestRedisClusterReshardIsNotALoss(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	ctx := context.Background()
	for _, s := range cluster.Servers {
		// A master counts as not restarted since a slot arrived only if it
		// started 2 s before the slot's marker was confirmed.
		c := s.Client(t)
		require.Eventually(t, func() bool {
			_, up, _ := strings.Cut(c.Info(ctx, "server").Val(), "uptime_in_seconds:")
			n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(up, "\n", 2)[0]))
			return err == nil && n >= 3
		}, 20*time.Second, 50*time.Millisecond)
	}
	_, err := lease.MarkFresh(ctx, client, keyspace.Space{})
	require.NoError(t, err)
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	var ids []string
	for i := range 60 {
		id := fmt.Sprintf("session-%d", i)
		ids = append(ids, id)
		require.NoError(t, store.Put(ctx, session.Session{ID: id, URL: "http://127.0.0.1:1/", Interval: session.Duration(50 * time.Millisecond)}))
	}
	rec := newRecorder()
	cfg := func(id string) Config {
		c := fastConfig(client, id, rec.poller(id))
		c.LossQuarantine = time.Minute
		return c
	}
	a := start(t, cfg("a"))
	start(t, cfg("b"))
	holders := func() map[string]string {
		hs, err := lease.Inspect(ctx, client, keyspace.Space{}, ids, 0)
		require.NoError(t, err)
		out := map[string]string{}
		for _, h := range hs {
			if h.Owner != "" {
				out[h.Session] = lease.HolderOf(h.Owner)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(holders()) == len(ids) }, 15*time.Second, 20*time.Millisecond)

	for _, id := range ids[:20] {
		slot := keyspace.Slot(keyspace.Space{}.Lease(id))
		cluster.MigrateSlot(t, slot, (cluster.SlotOwner(t, slot)+1)%len(cluster.Servers))
	}
	a.stop(t)
	require.Eventually(t, func() bool {
		own := holders()
		for _, id := range ids {
			if own[id] != "b" {
				return false
			}
		}
		return true
	}, 15*time.Second, 20*time.Millisecond, "b takes every session without a quarantine")
	rec.check(t)
}
