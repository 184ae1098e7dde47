package poller

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

// TestSessionsLostWithRedisDataAreNotPolledAgain is issue 10 item 1: after
// Redis loses its data (FLUSHALL, or a restart without persistence) and
// nobody puts the sessions back, no worker polls them again once it has
// reread its buckets, and no lease of them is left in Redis. Before the
// fix, a round that saw no members (the flush removed the membership too)
// dropped the bucket records while the polls still ran (their leases not
// yet found lost); their definitions were kept, and the records made again
// knew nothing of them, so the workers polled (and re-acquired) the deleted
// sessions for ever.
func TestSessionsLostWithRedisDataAreNotPolledAgain(t *testing.T) {
	t.Parallel()
	for _, loss := range []string{"flushall", "restart"} {
		t.Run(loss, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			client := srv.Client(t)
			ids := addSessions(t, client, 30, 200*time.Millisecond)
			rec := newRecorder()
			var ws []*running
			for _, id := range []string{"w1", "w2", "w3"} {
				cfg := fastConfig(client, id, rec.poller(id))
				// A round (every 100 ms) sees the membership the loss
				// emptied before a renewal (every 500 ms) finds the
				// leases gone and before the next heartbeat puts the
				// membership back: as with the defaults when the
				// discovery tick comes first.
				cfg.DiscoveryInterval = 100 * time.Millisecond
				cfg.RenewInterval, cfg.LeaseTTL = 500*time.Millisecond, 1500*time.Millisecond
				cfg.HeartbeatInterval = 500 * time.Millisecond
				ws = append(ws, start(t, cfg))
			}
			require.Eventually(t, func() bool {
				for _, id := range ids {
					if rec.polled(id) == 0 {
						return false
					}
				}
				return true
			}, 10*time.Second, 20*time.Millisecond)

			switch loss {
			case "flushall":
				require.NoError(t, client.FlushAll(context.Background()).Err())
			case "restart":
				srv.Restart()
			}
			require.Eventually(t, func() bool {
				for _, w := range ws {
					st := w.c.Status()
					if st.Sessions > 0 || len(st.Owned) > 0 {
						return false
					}
				}
				return leaseKeys(t, client) == 0
			}, 10*time.Second, 20*time.Millisecond, "workers still hold the deleted sessions")

			before := rec.total()
			lease := ws[0].c.cfg.LeaseTTL
			require.Never(t, func() bool { return rec.total() != before || leaseKeys(t, client) != 0 },
				2*lease, 20*time.Millisecond, "a deleted session was polled or leased again")
			rec.check(t)
		})
	}
}

// leaseKeys counts the lease keys in Redis.
func leaseKeys(t *testing.T, client redis.UniversalClient) int {
	t.Helper()
	keys, err := client.Keys(context.Background(), "poll:lease:*").Result()
	if err != nil {
		return -1 // Redis restarting: not settled
	}
	return len(keys)
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.count {
		n += c
	}
	return n
}
