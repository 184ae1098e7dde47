package poller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
)

// TestReleaseGoesSoonestDueFirstInWaves: many leases are released soonest
// due first (an unknown due first of all), in waves of 256 and 1,024 and
// then the rest, each wave announced as it is released, so that a
// successor can take the sessions due next before the rest are released.
func TestReleaseGoesSoonestDueFirstInWaves(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	_, err := lease.MarkFresh(context.Background(), client, keyspace.Space{})
	require.NoError(t, err)
	var mu sync.Mutex
	var released []string
	cfg := fastConfig(client, "w", PollFunc(func(context.Context, *Turn) error { return nil }))
	// Nothing renews the leases here: they must outlast the test however
	// slow the machine (with the 900ms TTL some ran out before the
	// release under load, and were not released).
	cfg.LeaseTTL, cfg.RenewInterval, cfg.RequestTimeout = time.Minute, 20*time.Second, 5*time.Second
	cfg.Observer = LeaseEvents(func(e Event) {
		if e.Type == EventReleased {
			mu.Lock()
			released = append(released, e.Session)
			mu.Unlock()
		}
	})
	c, err := New(cfg)
	require.NoError(t, err)

	const n = 1500
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%04d", i)
	}
	got := c.holdings.leases.Acquire(context.Background(), ids)
	now := time.Now()
	hs := make([]lease.Handoff, n)
	for i, r := range got {
		require.NotNil(t, r.Lease, r.Session)
		hs[i] = lease.Handoff{Lease: r.Lease}
		if i > 0 { // s0000 has no schedule
			hs[i].NextPoll = now.Add(time.Duration(i) * time.Millisecond)
		}
	}
	rand.Shuffle(n, func(i, j int) { hs[i], hs[j] = hs[j], hs[i] })

	sub := client.Subscribe(context.Background(), keyspace.Space{}.Events())
	t.Cleanup(func() { _ = sub.Close() })
	_, err = sub.Receive(context.Background())
	require.NoError(t, err)

	count, err := c.holdings.release(context.Background(), hs, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, n, count)
	require.Equal(t, ids, released, "soonest due first")
	// firstReleaseWave (256), secondReleaseWave (1024), then the other 220:
	// three waves, three announcements.
	for i := range 3 {
		select {
		case msg := <-sub.Channel():
			ev, err := nodes.DecodeEvent(msg.Payload)
			require.NoError(t, err)
			require.Equal(t, nodes.EventRelease, ev.Type, "wave %d", i)
		case <-time.After(5 * time.Second):
			t.Fatalf("no announcement of wave %d", i)
		}
	}
	require.Empty(t, owners(t, client, ids), "every lease released")
}

// TestLoadReadsAssignedBucketsFirst: once a round has read definitions of
// its assigned buckets, it stops before the buckets it only watches and
// asks for another round, so that it acquires first (after a peer left,
// those sessions are the peer's, due now); the next round reads the rest.
func TestLoadReadsAssignedBucketsFirst(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 40, time.Second)
	c, err := New(fastConfig(client, "w", PollFunc(func(context.Context, *Turn) error { return nil })))
	require.NoError(t, err)
	assigned := map[int]bool{}
	for i, id := range ids {
		assigned[keyspace.BucketOf(id)] = i%2 == 0
	}
	for b, a := range assigned {
		c.view.buckets[b] = &bucket{assigned: a}
	}
	loaded := func() (assignedLoaded, watchedLoaded int) {
		for _, st := range c.view.buckets {
			switch {
			case st.loaded && st.assigned:
				assignedLoaded++
			case st.loaded:
				watchedLoaded++
			}
		}
		return
	}
	drainKick := func() bool {
		select {
		case <-c.news.kick:
			return true
		default:
			return false
		}
	}
	drainKick()

	require.True(t, c.view.loadBuckets(context.Background()))
	a, w := loaded()
	require.Positive(t, a)
	require.Zero(t, w, "the watched buckets wait for the next round")
	require.True(t, drainKick(), "another round is asked for")
	require.NotEmpty(t, c.view.sessions)

	require.True(t, c.view.loadBuckets(context.Background()))
	a2, w2 := loaded()
	require.Equal(t, a, a2)
	require.Equal(t, len(c.view.buckets)-a, w2, "the next round reads the rest")
	require.False(t, drainKick())
}
