package poller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

func TestAuditPick(t *testing.T) {
	tests := []struct {
		name         string
		buckets      []int
		from, rounds int
		share        []int
		next         int
	}{
		{"none", nil, 5, 10, nil, 0},
		{"all in one round", []int{3, 7, 9}, 0, 1, []int{3, 7, 9}, 10},
		{"a share from the start", []int{3, 7, 9, 12}, 0, 2, []int{3, 7}, 8},
		{"the next share", []int{3, 7, 9, 12}, 8, 2, []int{9, 12}, 13},
		{"wraps around", []int{3, 7, 9, 12}, 13, 2, []int{3, 7}, 8},
		{"from a bucket gone since", []int{3, 9, 12}, 8, 3, []int{9}, 10},
		{"more rounds than buckets: one a round", []int{3, 7}, 4, 100, []int{7}, 8},
		{"wraps inside a share", []int{3, 7, 9}, 9, 1, []int{9, 3, 7}, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			share, next := auditPick(tt.buckets, tt.from, tt.rounds)
			require.Equal(t, tt.share, share)
			require.Equal(t, tt.next, next)
		})
	}
	require.Equal(t, 24, newAudit(auditPeriod, 5*time.Second).rounds)
	require.Equal(t, 1, newAudit(auditPeriod, time.Hour).rounds)
}

// TestSessionDeletedAroundTheStoreStopsPolling: a session key deleted
// with redis-cli (no change recorded, its index entry left) stopped
// being polled only when its holder stopped; the audit of full rounds
// reads its bucket again and the session goes.
func TestSessionDeletedAroundTheStoreStopsPolling(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	ids := addSessions(t, client, 2, 50*time.Millisecond)
	log := &pollLog{polls: map[string][]pollAt{}}
	cfg := fastConfig(client, "a", log.poller("a"))
	cfg.DiscoveryInterval = 300 * time.Millisecond
	cfg.auditPeriod = cfg.DiscoveryInterval // each full round reads every bucket again
	w := start(t, cfg)
	require.Eventually(t, func() bool { return len(w.c.Status().Owned) == 2 }, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, client.Del(context.Background(), keyspace.Space{}.Session(ids[0])).Err())
	require.Eventually(t, func() bool { return len(w.c.Status().Owned) == 1 }, 20*time.Second, 10*time.Millisecond,
		"the audit reads its bucket again: deleted, it is no longer polled")
	require.Equal(t, ids[1], w.c.Status().Owned[0])
}
