package poller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

// perWorker counts the sessions of ids each worker holds.
func perWorker(t *testing.T, client redis.UniversalClient, ids []string) (map[string]int, int) {
	own := owners(t, client, ids)
	per := map[string]int{}
	for _, w := range own {
		per[w]++
	}
	return per, len(own)
}

// TestPlansByPollLoad: six sessions polled every 50 ms whose buckets all
// rank w1 first, among forty polled hourly. Planned by session counts they
// would mostly stay on w1; planned by load (the writers' polls per day)
// each worker takes three. The index starts without complete loads (as
// one written before loads were kept): once Store.RebuildLoads counts
// them, the running workers switch to planning by load.
func TestPlansByPollLoad(t *testing.T) {
	t.Parallel()
	client, store := freshStore(t)
	ctx := context.Background()
	f := assign.NewFleetIDs("w1", "w2")
	var fast, all []string
	for i := 0; len(fast) < 6; i++ {
		id := fmt.Sprintf("fast-%d", i)
		if f.Rank(id)[0] == "w1" {
			fast = append(fast, id)
		}
	}
	for _, id := range fast {
		require.NoError(t, store.Put(ctx, session.Session{ID: id, URL: "http://127.0.0.1:1/" + id, Interval: session.Duration(50 * time.Millisecond)}))
	}
	all = append(all, fast...)
	for i := range 40 {
		id := fmt.Sprintf("slow-%d", i)
		all = append(all, id)
		require.NoError(t, store.Put(ctx, session.Session{ID: id, URL: "http://127.0.0.1:1/" + id, Interval: session.Duration(time.Hour)}))
	}
	// As an index written before loads were kept: not complete.
	require.NoError(t, client.HDel(ctx, keyspace.Space{}.SessionLoads(), "complete").Err())

	rec := newRecorder()
	for _, id := range []string{"w1", "w2"} {
		start(t, fastConfig(client, id, rec.poller(id)))
	}
	require.Eventually(t, func() bool { _, n := perWorker(t, client, all); return n == len(all) }, 10*time.Second, 20*time.Millisecond)
	byCount, _ := perWorker(t, client, fast)
	t.Logf("planned by counts: fast sessions per worker %v", byCount)

	_, err := store.RebuildLoads(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		per, n := perWorker(t, client, fast)
		return n == len(fast) && per["w1"] == 3 && per["w2"] == 3
	}, 15*time.Second, 20*time.Millisecond, "planned by load, each worker polls three of the fast sessions")
	rec.check(t)
}

// TestWeightsShareTheLoad: a worker of weight 3 gets three times the share
// of one of weight 1: the lighter one holds at most ceil(80 × 1/4 × 1.05).
func TestWeightsShareTheLoad(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 80, 100*time.Millisecond)
	rec := newRecorder()
	heavy := fastConfig(client, "w1", rec.poller("w1"))
	heavy.Weight = 3
	start(t, heavy)
	start(t, fastConfig(client, "w2", rec.poller("w2")))
	require.Eventually(t, func() bool {
		per, n := perWorker(t, client, ids)
		return n == len(ids) && per["w2"] <= 21 && per["w1"] >= 59
	}, 30*time.Second, 20*time.Millisecond) // 15 s ran out once in a fresh-clone make test (the suite's other packages beside it)
	rec.check(t)
}

// plannedOwners is the owner of each of ids (sessions all polled every
// interval) as the workers plan them: by their loads in polls per day.
func plannedOwners(workers, ids []string, interval time.Duration) []string {
	loads := make([]int, assign.Buckets)
	for _, id := range ids {
		loads[keyspace.BucketOf(id)] += session.PollsPerDay(interval)
	}
	p := assign.NewFleetIDs(workers...).Plan(loads, DefaultBalanceSlack)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = p.OwnerOf(id)
	}
	return out
}

// freshStore starts a redis-server with a fresh keyspace (no quarantine to
// wait out) and returns a client and a session store on it.
func freshStore(t *testing.T) (*redis.Client, *session.Store) {
	t.Helper()
	client := redistest.Start(t).Client(t)
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	_, err = lease.MarkFresh(context.Background(), client, keyspace.Space{})
	require.NoError(t, err)
	return client, store
}

// TestWorkersOfDifferentSlacksAgree: a worker configured with no load
// bound and one with the default publish their slacks, say that they
// differ, and plan alike with the tightest (fleet.AgreedSlack): every
// session ends on the owner that plan names. (That two planners agree is
// decided in fleet's TestPlannersOfDifferentSlacksAgree.)
func TestWorkersOfDifferentSlacksAgree(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 40, 100*time.Millisecond) // 6 of the 40 move between the two slacks' plans
	rec := newRecorder()
	core, logs := observer.New(zap.WarnLevel)
	unbounded := fastConfig(client, "w1", rec.poller("w1"))
	unbounded.BalanceSlack, unbounded.Logger = Off, zap.New(core)
	start(t, unbounded)
	start(t, fastConfig(client, "w2", rec.poller("w2")))
	want := plannedOwners([]string{"w1", "w2"}, ids, 100*time.Millisecond)
	require.Eventually(t, heldAsPlanned(t, client, ids, want), 30*time.Second, 20*time.Millisecond, "the sessions are not where the tightest slack places them")
	require.Eventually(t, func() bool {
		return logs.FilterMessageSnippet("different balance slacks").Len() > 0
	}, 30*time.Second, 20*time.Millisecond, "w1 did not say that the members' slacks differ")
	warn := logs.FilterMessageSnippet("different balance slacks").All()[0]
	require.Equal(t, 0.05, warn.ContextMap()["balance_slack"], "the fleet plans with the tightest slack")
	require.Equal(t, float64(Off), warn.ContextMap()["configured"])
	rec.check(t)
}
