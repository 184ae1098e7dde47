package poller

import (
	"context"
	"slices"
	"sync"
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

// TestLeaseLostRereadsWhatItTakes: a session paused while the worker
// could not see the change (a loss whose quarantine notice it missed: the
// acquisition that met it timed out), then its lease lost: the worker took
// it again on its stale view and polled it. After a lost lease the next
// acquisitions read again the definition of every session they take
// (view.confirmAll).
func TestLeaseLostRereadsWhatItTakes(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := addSessions(t, client, 2, 50*time.Millisecond)
	rec := newRecorder()
	cfg := fastConfig(client, "w", rec.poller("w"))
	cfg.auditPeriod = -1 // no audit: it would read the pause too, in its time
	var mu sync.Mutex
	var lost bool
	var retaken int64 // the token of the lease taken again after the loss
	cfg.Observer = LeaseEvents(func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case e.Session != ids[0]:
		case e.Type == EventLost:
			lost = true
		case e.Type == EventAcquired && lost && retaken == 0:
			retaken = e.Token
		}
	})
	w := start(t, cfg)
	require.Eventually(t, func() bool { return rec.polled(ids[0]) >= 2 && rec.polled(ids[1]) >= 2 }, 20*time.Second, 10*time.Millisecond)
	keys := keyspace.Space{}

	// Paused around the store (no change recorded, as a change lost with
	// the record), then the lease gone (as Redis losing it).
	require.NoError(t, client.Set(ctx, keys.Session(ids[0]),
		`{"id":"`+ids[0]+`","url":"http://127.0.0.1:1/`+ids[0]+`","interval":"50ms","paused":true}`, 0).Err())
	require.NoError(t, client.Del(ctx, keys.Lease(ids[0])).Err())

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return retaken != 0
	}, 20*time.Second, 10*time.Millisecond, "the worker takes the lease again")
	require.Eventually(t, func() bool { return !slices.Contains(w.c.Status().Owned, ids[0]) }, 20*time.Second, 10*time.Millisecond,
		"read again once taken: paused, it is given back")
	mu.Lock()
	tok := retaken
	mu.Unlock()
	require.Less(t, rec.token(ids[0]), tok, "%s polled under the lease taken after the loss", ids[0])
	require.Eventually(t, func() bool { return rec.polled(ids[1]) >= 4 }, 20*time.Second, 10*time.Millisecond, "the other polls on")
}
