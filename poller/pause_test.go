package poller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// newStepped returns a Coordinator whose rounds the test runs itself,
// without Run, so that it decides how the steps of a round interleave with
// the writes of others. It heartbeats once (live for a minute); its leases
// last a minute (no renewal runs); the orphan watch has not begun.
func newStepped(t *testing.T, client redis.UniversalClient, id string, p Poller) *Coordinator {
	t.Helper()
	cfg := fastConfig(client, id, p)
	cfg.LeaseTTL, cfg.RenewInterval, cfg.RequestTimeout = time.Minute, 20*time.Second, 5*time.Second
	cfg.HeartbeatInterval, cfg.OrphanGrace = 20*time.Second, time.Minute
	c, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, c.beat.registry.Heartbeat(context.Background()))
	c.health.redisOK.Store(true)
	c.health.heartbeatAt.Store(c.cfg.Clock.Now().UnixNano())
	t.Cleanup(func() {
		_ = c.drain()
		c.holdings.sched.Close()
		c.claims.stopTimers()
	})
	return c
}

// joinGhost makes a live member that heartbeats once (live for a minute)
// and never takes a lease.
func joinGhost(t *testing.T, client redis.UniversalClient, id string) {
	t.Helper()
	ghost, err := nodes.New(nodes.Config{Client: client, ID: id, TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, ghost.Heartbeat(context.Background()))
}

// TestPausedSessionHeldOutsideItsBucketsStopsAtOnce is issue 22 item 1
// (a): a worker holding a session whose bucket the balance bound moved to
// another worker (it keeps the session for one lease TTL: the settle rule)
// reads that bucket no more, yet stops polling the session in the round
// that reads its pause. Before, it only looked at changes of the buckets
// it read, and polled the paused session until the settle rule let it go.
func TestPausedSessionHeldOutsideItsBucketsStopsAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	ids := addSessions(t, client, 6, 100*time.Millisecond)
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	joinGhost(t, client, "ghost")
	rec := newRecorder()
	c := newStepped(t, client, "w", rec.poller("w"))
	c.round(ctx, true)
	require.NotEmpty(t, c.holdings.held, "w holds its share")
	share := slices.Sorted(keysOf(c.holdings.held))

	// Find a held session and a session to add that makes the balance
	// bound move the held one's bucket to the ghost.
	held, extra := "", []session.Session(nil)
	for _, id := range share {
		if s, ok := balanceMove(c, id); ok {
			held, extra = id, s
			break
		}
	}
	require.NotEmpty(t, held, "the test needs an addition that moves a held session's bucket")
	require.NoError(t, store.PutMany(ctx, extra))
	c.round(ctx, false)
	require.Equal(t, "ghost", c.view.ownerOf(held), "the bound moved its bucket")
	require.Contains(t, c.holdings.held, held, "held back for a lease TTL (settle rule)")
	require.False(t, c.holdings.held[held].stopping)

	require.NoError(t, store.Pause(ctx, held))
	c.round(ctx, false) // the round the change's announcement asks for
	require.Equal(t, "ghost", c.view.ownerOf(held), "its bucket stays with the ghost")
	if w, ok := c.holdings.held[held]; ok {
		require.True(t, w.stopping, "the paused session's loop is stopped in the round that read the pause")
	}
	require.Eventually(t, func() bool {
		c.round(ctx, false) // reaps the loop once its poll returned, and releases
		return len(owners(t, client, []string{held})) == 0
	}, 10*time.Second, 10*time.Millisecond, "its lease is released")
	own := owners(t, client, ids)
	for _, id := range share {
		if id != held {
			require.Equal(t, "w", own[id], "%s is still held", id)
		}
	}
	rec.check(t)
}

// balanceMove returns sessions whose addition makes the balance bound
// move held's bucket off c to another member, before and after held is
// paused (a paused session weighs nothing): a companion in held's bucket,
// which keeps it weighing, and n heavier ones in another bucket of c.
func balanceMove(c *Coordinator, held string) ([]session.Session, bool) {
	const heavy = 20 * time.Millisecond
	b, iv := keyspace.BucketOf(held), c.view.sessions[held].Interval.D()
	weight := func(iv time.Duration) int {
		if c.view.weighing.complete {
			return session.PollsPerDay(iv)
		}
		return 1 // planned by session counts
	}
	elsewhere := func(weights []int) bool {
		owner := c.view.fleet.Plan(weights, c.cfg.BalanceSlack).Owner(b)
		return owner != c.cfg.ID && owner != ""
	}
	inBucket := func(bucket, n int) []session.Session {
		var out []session.Session
		for i := 0; len(out) < n; i++ {
			if id := fmt.Sprintf("extra-%d-%d", bucket, i); keyspace.BucketOf(id) == bucket {
				out = append(out, session.Session{ID: id, URL: "http://127.0.0.1:1/extra", Interval: session.Duration(heavy)})
			}
		}
		return out
	}
	tried := 0
	for b2 := 0; b2 < keyspace.SessionBuckets && tried < 100; b2++ {
		if b2 == b || c.view.plan.Owner(b2) != c.cfg.ID {
			continue
		}
		tried++
		for n := 1; n <= 3; n++ {
			weights := slices.Clone(c.view.plannable())
			weights[b] += weight(heavy)
			weights[b2] += n * weight(heavy)
			if !elsewhere(weights) {
				continue
			}
			weights[b] -= weight(iv)
			if elsewhere(weights) {
				return append(inBucket(b, 1), inBucket(b2, n)...), true
			}
		}
	}
	return nil, false
}

func keysOf[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// heldByPeer starts a redis-server with n sessions and returns them, with
// a peer (a lease manager of holder "peer") holding the first one's lease.
func heldByPeer(t *testing.T, n int, interval time.Duration) (redis.UniversalClient, *session.Store, []string, *lease.Manager, *lease.Lease) {
	t.Helper()
	client := redistest.Start(t).Client(t)
	ids := addSessions(t, client, n, interval)
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	peer, err := lease.New(lease.Config{Client: client, Holder: "peer", TTL: time.Minute})
	require.NoError(t, err)
	got := peer.Acquire(context.Background(), ids[:1])
	require.NotNil(t, got[0].Lease)
	return client, store, ids, peer, got[0].Lease
}

// TestAcquiredSessionPausedMeanwhileIsNotPolled is issue 22 item 1 (b):
// a worker whose view was read before a pause acquires the session right
// after its holder, having learned of the pause, released it; it must not
// poll it. Before, it started polling on its stale view and kept the
// session for a lease TTL.
func TestAcquiredSessionPausedMeanwhileIsNotPolled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client, store, ids, peer, held := heldByPeer(t, 3, 100*time.Millisecond)
	paused := ids[0]

	rec := newRecorder()
	c := newStepped(t, client, "w", rec.poller("w"))
	// The round's view is read before the pause ...
	c.claims.startRound()
	require.True(t, c.view.refresh(ctx, true))
	require.Contains(t, c.view.sessions, paused)
	// ... the peer learns of the pause and hands the session off ...
	require.NoError(t, store.Pause(ctx, paused))
	require.NoError(t, peer.Release(ctx, held))
	// ... and the round acquires what it wants.
	want := decide(c.world(true), c.claims, c.holdings.held, c.cfg.Clock.Now()).acquire
	require.Contains(t, want, paused)
	c.holdings.take(ctx, want, false)

	require.NotContains(t, c.holdings.held, paused, "a session paused before it was acquired is not polled")
	require.Empty(t, owners(t, client, []string{paused}), "its lease is given back at once")
	for _, id := range ids[1:] {
		require.Contains(t, c.holdings.held, id, "the active ones are polled")
	}
	require.Zero(t, rec.polled(paused))
	rec.check(t)
}

// TestReaddedSessionIgnoresTheRemovedOnesBackoff is issue 22 item 2: a
// session removed while backing off, whose holder released it with its
// backed-off due time (here a minute away), then added again under the
// same id, is polled within its first interval. Before, the successor
// kept the removed session's due time from the handoff mark.
func TestReaddedSessionIgnoresTheRemovedOnesBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client, store, ids, peer, held := heldByPeer(t, 1, 2*time.Second)
	id := ids[0]

	// A holder that had not learned of the removal yet releases the
	// session with its backed-off schedule, after the removal.
	require.NoError(t, store.Delete(ctx, id))
	require.NoError(t, peer.HandOff(ctx, lease.Handoff{Lease: held, NextPoll: time.Now().Add(time.Minute)}))
	require.NoError(t, store.Put(ctx, session.Session{ID: id, URL: "http://127.0.0.1:1/fixed", Interval: session.Duration(200 * time.Millisecond)}))

	rec := newRecorder()
	c := newStepped(t, client, "w", rec.poller("w"))
	c.round(ctx, true)
	h := c.holdings.held[id]
	require.NotNil(t, h)
	w := h.loop
	require.Less(t, c.holdings.sched.DueOf(w).Sub(w.lease.Acquired()), 10*time.Second,
		"the first poll comes within the new definition's first interval, not on the removed one's backoff (a minute)")
	require.Eventually(t, func() bool { return rec.polled(id) > 0 }, 10*time.Second, 10*time.Millisecond)
}

// TestHeldToRecheck: the held sessions read again are those of a changed
// bucket (or any, when the change record was lost) that no bucket read of
// the round covered.
func TestHeldToRecheck(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	bucket := func(id string) int { return keyspace.BucketOf(id) }
	held := map[string]struct{}{}
	for _, id := range ids {
		held[id] = struct{}{}
	}
	tests := []struct {
		name   string
		stale  []string // sessions whose bucket changed
		all    bool
		loaded []string // sessions whose bucket was read this round
		want   []string
	}{
		{"nothing changed", nil, false, nil, nil},
		{"changed, not read: read again", []string{"a", "c"}, false, nil, []string{"a", "c"}},
		{"changed and read with its bucket", []string{"a", "c"}, false, []string{"a"}, []string{"c"}},
		{"record lost: every one not read", nil, true, []string{"b"}, []string{"a", "c", "d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stale := map[int]struct{}{}
			for _, id := range tt.stale {
				stale[bucket(id)] = struct{}{}
			}
			loaded := map[int]bool{}
			for _, id := range tt.loaded {
				loaded[bucket(id)] = true
			}
			got := heldToRecheck(held, stale, tt.all, func(b int) bool { return loaded[b] })
			require.Equal(t, tt.want, got)
		})
	}
}

// TestInChangedBuckets: an acquisition reads again the definitions of the
// sessions whose bucket changed since its view was read.
func TestInChangedBuckets(t *testing.T) {
	ids := []string{"a", "b", "c"}
	changed := []session.BucketSize{{Bucket: keyspace.BucketOf("c")}, {Bucket: keyspace.BucketOf("a"), Selector: "zone=eu"}}
	require.Equal(t, []string{"a", "c"}, inChangedBuckets(ids, changed))
	require.Empty(t, inChangedBuckets(ids, nil))
}

// TestFirstPollBound: a successor waits for its predecessor's schedule at
// most one interval and the spread step, which is as far ahead as the
// next poll of a holder that does not back off ever is.
func TestFirstPollBound(t *testing.T) {
	for _, iv := range []time.Duration{10 * time.Millisecond, 200 * time.Millisecond, 2 * time.Second, time.Hour} {
		require.Equal(t, iv+maxSpreadStep(iv), FirstPollBound(iv), iv)
		next := time.Unix(0, 0).Add(iv)
		require.LessOrEqual(t, iv+SpreadStep("s", iv, next), FirstPollBound(iv), "a holder's next poll is within the bound")
	}
}

// TestPauseCancelsTheRunningPoll: pausing (or removing) a session whose
// poll is running cancels that poll's ctx, and its lease is released once
// it returned; a handoff would let it finish. Before, a 10 s poll went on
// 9 s after the pause (an embedder's trial).
func TestPauseCancelsTheRunningPoll(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	ids := addSessions(t, client, 1, 100*time.Millisecond)
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	running, cancelled := make(chan struct{}, 1), make(chan error, 1)
	p := PollFunc(func(ctx context.Context, _ *Turn) error {
		select {
		case running <- struct{}{}:
		default:
		}
		<-ctx.Done() // a long poll: only a cancellation ends it
		select {
		case cancelled <- ctx.Err():
		default:
		}
		return ctx.Err()
	})
	w := start(t, fastConfig(client, "w", p))
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the poll did not start")
	}
	require.NoError(t, store.Pause(ctx, ids[0]))
	select {
	case err := <-cancelled:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the running poll of the paused session was not cancelled")
	}
	require.Eventually(t, func() bool { return len(owners(t, client, ids)) == 0 }, 10*time.Second, 10*time.Millisecond,
		"its lease is released once the poll returned")
	w.stop(t)
}
