package integration

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// TestStaleHolderCannotOverwriteSuccessorState is issue 14's acceptance
// test of fenced state against the real binary: two workers poll sessions
// whose answers change at every poll (a new ETag), so that the HTTP poller
// saves each session's state at every poll. The holder of one session is
// SIGSTOPped past its lease TTL, the other worker takes the session over
// and saves, and the paused worker is resumed (SIGCONT), its poll of that
// moment still in flight. Then w1's link to Redis gets a latency longer
// than the TTL: the saves it sends while its leases are still held reach
// Redis after the leases have moved on, which only the save script can
// refuse (a paused worker's own lease deadline stops it from sending).
// Redis's MONITOR stream, which lists every token minted, every save call
// and every save accepted in execution order, shows such late save calls,
// none accepted, and no state's token going back; the successor's saves are
// there; and at the end every session's stored state was written under its
// current lease.
func TestStaleHolderCannotOverwriteSuccessorState(t *testing.T) {
	rds := startRedis(t)
	admin := redistest.Client(t, rds.URL())
	watch := startStateWatch(t, rds.Addr())
	rec := newRecorder(t, quickClient(t, rds.Addr()), pollHold, false)
	rec.etags.Store(true)
	store, err := session.NewStore(admin, keyspace.Space{})
	require.NoError(t, err)
	ctx := context.Background()
	var ids []string
	for i := range 8 {
		id := fmt.Sprintf("st-%d", i)
		ids = append(ids, id)
		require.NoError(t, store.Put(ctx, session.Session{ID: id, URL: rec.URL + "/" + id, Interval: session.Duration(chaosInterval)}))
	}
	proxy := startProxy(t, rds.Addr())
	workers := map[string]*worker{
		"w1": startWorker(t, "redis://"+proxy.Addr(), "w1", chaosFlags...),
		"w2": startWorker(t, rds.URL(), "w2", chaosFlags...),
	}
	saves := func() map[string]int {
		n := map[string]int{}
		for _, e := range watch.snapshot() {
			if e.Kind == StateSave {
				n[e.Session]++
			}
		}
		return n
	}
	require.Eventually(t, func() bool {
		n := saves()
		for _, id := range ids {
			if n[id] < 3 {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "every session's state saved at its polls")

	// Pause the holder of ids[0] for twice the lease TTL.
	owner, err := admin.Get(ctx, keyspace.Space{}.Lease(ids[0])).Result()
	require.NoError(t, err)
	victim := lease.HolderOf(owner)
	require.Contains(t, workers, victim)
	oldTok := rec.lastToken(ids[0])
	require.Positive(t, oldTok)
	t.Logf("SIGSTOP %s (holder of %s, token %d) for %v", victim, ids[0], oldTok, 2*chaosTTL)
	workers[victim].signal(t, syscall.SIGSTOP)
	hold(2 * chaosTTL) // the fault itself: a pause past the TTL
	succOwner, err := admin.Get(ctx, keyspace.Space{}.Lease(ids[0])).Result()
	require.NoError(t, err, "%s has a lease again before the resume", ids[0])
	successor := lease.HolderOf(succOwner)
	require.NotEqual(t, victim, successor, "the other worker took %s over", ids[0])
	workers[victim].signal(t, syscall.SIGCONT)
	resumed := time.Now()

	// The resumed worker polls again (it rejoins and gets its share back);
	// then every session's stored state is its current lease's.
	require.Eventually(t, func() bool { return len(rec.polledSince(resumed, nil)) == len(ids) }, 20*time.Second, 20*time.Millisecond)

	// w1 holds sessions again; then its saves are delayed past the TTL.
	require.Eventually(t, func() bool { return heldBy(t, admin, ids)["w1"] >= 2 }, 20*time.Second, 20*time.Millisecond)
	d := chaosTTL + 500*time.Millisecond
	t.Logf("latency %v between w1 and Redis for %v", d, 2*chaosTTL)
	proxy.SetDelay(d)
	hold(2 * chaosTTL) // the fault itself
	proxy.Heal()
	healed := time.Now()
	require.Eventually(t, func() bool { return len(rec.polledSince(healed, nil)) == len(ids) }, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return statesCurrent(t, admin, rec, ids) }, 10*time.Second, 20*time.Millisecond,
		"every session's state written under its current lease")

	rep := CheckStateWrites(watch.snapshot())
	require.Positive(t, rep.StaleAttempts, "no save call reached Redis after its lease had moved on: the fence was not exercised")
	require.Empty(t, rep.Stale, "saves accepted from a holder whose lease had moved on")
	require.Empty(t, rep.Backwards, "stored state tokens went back")
	var bySuccessor bool
	for _, e := range watch.snapshot() {
		if e.Kind == StateSave && e.Session == ids[0] && e.Token > oldTok {
			bySuccessor = true
		}
	}
	require.True(t, bySuccessor, "%s's successor %s saved its state", ids[0], successor)
	t.Logf("%d saves, %d save calls from a holder whose lease had moved on, all refused; %s taken over by %s",
		rep.Saves, rep.StaleAttempts, ids[0], successor)
}

// heldBy counts the sessions of ids each worker holds a lease of.
func heldBy(t *testing.T, c *redis.Client, ids []string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, id := range ids {
		if owner, err := c.Get(context.Background(), keyspace.Space{}.Lease(id)).Result(); err == nil {
			n[lease.HolderOf(owner)]++
		}
	}
	return n
}

// statesCurrent reports whether each session's stored state carries the
// token of its current lease: the greatest token rec saw it polled with
// (the fencing record holds it only after the session's first release).
func statesCurrent(t *testing.T, c *redis.Client, rec *recorder, ids []string) bool {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		fence := strconv.FormatInt(rec.lastToken(id), 10)
		tok, err := c.HGet(ctx, keyspace.Space{}.State(id), "token").Result()
		if err != nil || tok != fence {
			return false
		}
		if _, err := strconv.ParseInt(tok, 10, 64); err != nil {
			return false
		}
	}
	return true
}
