package poller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

// TestDrainPastItsTimeoutReleasesWhatItCan is issue 10 item 2: a poll that
// outlives DrainTimeout (and ignores its cancellation) costs only its own
// lease. The leases whose polls returned are released, the worker leaves
// the membership and says so, and Run reports the one poll left. Before the
// fix the release, the leave and the announcement shared the drain's
// deadline, already past: all failed, and every lease was left to expire.
func TestDrainPastItsTimeoutReleasesWhatItCan(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 6, 50*time.Millisecond)
	stuck := ids[0]
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) })
	started := make(chan struct{}, 1)
	p := PollFunc(func(ctx context.Context, tn *Turn) error {
		s := tn.Session()
		if s.ID == stuck {
			select {
			case started <- struct{}{}:
			default:
			}
			<-unblock // ignores ctx: a poll stuck in a call without a deadline
		}
		return nil
	})
	var events atomic.Int64
	cfg := fastConfig(client, "w", p)
	cfg.DrainTimeout = 300 * time.Millisecond
	cfg.Observer = LeaseEvents(func(Event) { events.Add(1) })
	w := start(t, cfg)
	require.Eventually(t, func() bool { return len(w.c.Status().Owned) == len(ids) }, 30*time.Second, 10*time.Millisecond)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck poll did not start")
	}

	w.cancel()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	require.ErrorContains(t, w.err, "waiting for 1 polls")
	require.Equal(t, map[string]string{stuck: "w"}, owners(t, client, ids),
		"only the stuck poll's lease is left to expire")
	members, err := client.ZRange(context.Background(), keyspace.Space{}.NodeIndex(), 0, -1).Result()
	require.NoError(t, err)
	require.NotContains(t, members, "w", "the worker left the membership")

	// Nothing of the worker fires after Run returned: the stuck poll's
	// lease was given up (its deadline timer stopped) during the drain.
	require.Empty(t, w.c.Status().Owned)
	require.Zero(t, w.c.PollStats().LeasesHeld)
	after := events.Load()
	require.Never(t, func() bool { return events.Load() != after }, cfg.LeaseTTL+200*time.Millisecond, 20*time.Millisecond,
		"a lease event after Run returned")
}

// TestDrainReleasesEachSessionAsItsPollReturns: a drain releases the
// leases of the sessions with no poll running at once, while one poll
// still runs, and that one's lease as the poll returns. Before, a drain
// released nothing until the slowest poll of the worker had returned: one
// slow target held every session of a stopping worker (cron slots were
// late or lost).
func TestDrainReleasesEachSessionAsItsPollReturns(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 6, 50*time.Millisecond)
	slow := ids[0]
	unblock := make(chan struct{})
	started := make(chan struct{}, 1)
	p := PollFunc(func(ctx context.Context, tn *Turn) error {
		if tn.Session().ID == slow {
			select {
			case started <- struct{}{}:
			default:
			}
			<-unblock // a slow target: the drain waits for it
		}
		return nil
	})
	cfg := fastConfig(client, "w", p)
	cfg.DrainTimeout = time.Minute
	w := start(t, cfg)
	require.Eventually(t, func() bool { return len(w.c.Status().Owned) == len(ids) }, 30*time.Second, 10*time.Millisecond)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow poll did not start")
	}

	w.cancel()
	require.Eventually(t, func() bool {
		o := owners(t, client, ids)
		return len(o) == 1 && o[slow] == "w"
	}, 10*time.Second, 10*time.Millisecond, "the sessions with no poll running are released while the slow one runs")
	select {
	case <-w.done:
		t.Fatal("Run returned before the slow poll")
	default:
	}
	close(unblock)
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	require.NoError(t, w.err)
	require.Empty(t, owners(t, client, ids), "the slow poll's lease is released once it returned")
}
