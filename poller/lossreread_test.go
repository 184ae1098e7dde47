package poller

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/faultproxy"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// TestSessionPausedAfterADataLossIsNotPolled (rule 7; the generated chaos
// run, seed 20261129 iteration 487): Redis loses its data, the operator
// applies the sessions again and pauses one, while the worker cannot see
// Redis. Counted again from nothing, the session revision could reach the
// revision the worker had seen before the loss; the change record then read
// as "nothing new" and the worker kept the paused session as active, took
// its lease and polled it. Two defences, each tested alone:
//   - the revision counter, started afresh, starts at the server's clock
//     and records its start ("!start" in the changes set), so it never
//     comes back to a revision seen before the loss and a reader that saw
//     one below the start rereads every bucket (session.Store.Changes);
//     with the loss quarantine off the worker sees nothing else of the
//     loss, as one paused (SIGSTOP) through the whole quarantine would;
//   - an acquisition refused for the loss quarantine makes the worker read
//     every session afresh (view.dataLost); here the counter is set back
//     to the revision the worker saw, as a counter counted from 0 was.
func TestSessionPausedAfterADataLossIsNotPolled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// quarantine: the loss quarantine is on (the lease TTL).
		quarantine bool
	}{
		{name: "counter started afresh, no quarantine", quarantine: false},
		{name: "quarantine, counter set back", quarantine: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testPausedAfterADataLoss(t, tc.quarantine)
		})
	}
}

func testPausedAfterADataLoss(t *testing.T, quarantine bool) {
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	proxy, err := faultproxy.Start(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = viaProxy.Close() })
	store, err := session.NewStore(admin, keyspace.Space{})
	require.NoError(t, err)
	ids := addSessions(t, admin, 8, 50*time.Millisecond)
	put := func(id, url string) {
		t.Helper()
		require.NoError(t, store.Put(ctx, session.Session{ID: id, URL: url, Interval: session.Duration(50 * time.Millisecond)}))
	}
	revision := func() int64 {
		t.Helper()
		rev, _, err := store.Sizes(ctx)
		require.NoError(t, err)
		return rev
	}

	rec := newRecorder()
	var mu sync.Mutex
	lastURL := map[string]string{}
	inner := rec.poller("w")
	poller := PollFunc(func(ctx context.Context, tn *Turn) error {
		mu.Lock()
		lastURL[tn.Session().ID] = tn.Session().URL
		mu.Unlock()
		return inner.Poll(ctx, tn)
	})
	cfg := fastConfig(viaProxy, "w", poller)
	// The worker's registration must outlive the partition however slow
	// the machine (a fresh-clone make test saw its heartbeat key expire
	// before the test could keep it): a membership that changed would
	// make it read its buckets afresh, and hide the bug.
	cfg.HeartbeatTTL = time.Minute
	if !quarantine {
		cfg.LossQuarantine = -1
	}
	r := start(t, cfg)
	polledAll := func(ids []string, n int) func() bool {
		return func() bool {
			for _, id := range ids {
				if rec.polled(id) < n {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, polledAll(ids, 2), 30*time.Second, 10*time.Millisecond, "every session polled")

	// Four more revisions; the worker has seen the last once it polls the
	// new URL.
	newURL := "http://127.0.0.1:1/" + ids[1] + "/v2"
	for _, u := range []string{"/a", "/b", "/c"} {
		put(ids[1], "http://127.0.0.1:1/"+ids[1]+u)
	}
	put(ids[1], newURL)
	seen := revision()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return lastURL[ids[1]] == newURL
	}, 30*time.Second, 10*time.Millisecond, "the worker applied revision %d", seen)

	// The loss, while the worker cannot see Redis: the sessions applied
	// again, one paused, and the revision back where the worker saw it.
	proxy.Partition()
	// The worker's registration survives (as when its heartbeat is written
	// again before it next reads the members): a membership that changed
	// would make it read its buckets afresh anyway, and hide the bug.
	space := keyspace.Space{}
	node := map[string]string{}
	for _, k := range []string{space.Node("w"), space.NodeIndex()} {
		dump, err := admin.Dump(ctx, k).Result()
		require.NoError(t, err)
		node[k] = dump
	}
	require.NoError(t, admin.FlushAll(ctx).Err())
	for k, dump := range node {
		require.NoError(t, admin.Restore(ctx, k, 0, dump).Err())
	}
	for _, id := range ids {
		url := "http://127.0.0.1:1/" + id
		if id == ids[1] {
			url = newURL
		}
		put(id, url)
	}
	require.NoError(t, store.Pause(ctx, ids[0]))
	if quarantine {
		// Where the counter was counted from 0: back where the worker saw it.
		require.NoError(t, admin.Set(ctx, space.SessionRev(), seen, 0).Err())
		require.NoError(t, admin.Del(ctx, space.SessionChanges()).Err())
	} else {
		// Counted from 0, more writes brought the revision back to seen.
		for revision() < seen {
			put(ids[1], newURL)
		}
		require.GreaterOrEqual(t, revision(), seen)
	}
	// The tokens the worker polled under before the loss: a lease taken
	// after it has a greater one (minted from the server's clock).
	before := map[string]int64{}
	for _, id := range ids {
		before[id] = rec.token(id)
	}
	proxy.Heal()

	// Until the worker learns of the loss (a renewal finds its lease gone),
	// it rightly goes on polling under the leases it renewed before: how
	// long that takes depends on the machine. So the test waits for what
	// shows it learnt: every other session polled under a lease taken after
	// the loss, and the paused one no longer held. The bug took the paused
	// session's lease again with the others and polled it.
	retaken := func() bool {
		for _, id := range ids[1:] {
			if rec.token(id) <= before[id] {
				return false
			}
		}
		return true
	}
	require.Eventually(t, func() bool {
		return retaken() && !slices.Contains(r.c.Status().Owned, ids[0])
	}, 30*time.Second, 10*time.Millisecond, "the others taken again after the loss, %s let go", ids[0])
	require.Equal(t, before[ids[0]], rec.token(ids[0]), "%s was paused after the loss, and polled under a lease taken after it", ids[0])
	rec.reset()
	require.Eventually(t, polledAll(ids[1:], 3), 30*time.Second, 10*time.Millisecond, "the others polled again")
	require.Zero(t, rec.polled(ids[0]), "%s was paused after the loss", ids[0])
	require.Equal(t, before[ids[0]], rec.token(ids[0]), "%s was paused after the loss, and polled under a lease taken after it", ids[0])
	rec.check(t)
}
