package poller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/history"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
)

// pressureLog records, for the memory pressure tests, every poll (as
// history.Poll) and every lease release or loss the workers report.
type pressureLog struct {
	mu      sync.Mutex
	polls   []history.Poll
	dropped []string // "worker: event session"
}

func (p *pressureLog) poller(worker string) Poller {
	return PollFunc(func(ctx context.Context, tn *Turn) error {
		s, l := tn.Session(), tn.lease
		start := time.Now()
		select { // the poll's work
		case <-ctx.Done():
		case <-time.After(time.Millisecond):
		}
		p.mu.Lock()
		p.polls = append(p.polls, history.Poll{Session: s.ID, Worker: worker, Token: l.Token(), Start: start, End: time.Now()})
		p.mu.Unlock()
		return nil
	})
}

func (p *pressureLog) onEvent(worker string) func(Event) {
	return func(e Event) {
		if e.Type == EventReleased || e.Type == EventLost {
			p.mu.Lock()
			p.dropped = append(p.dropped, fmt.Sprintf("%s: %s %s", worker, e.Type, e.Session))
			p.mu.Unlock()
		}
	}
}

// since returns the releases and losses reported so far, from index from.
func (p *pressureLog) droppedSince(from int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.dropped[from:]...)
}

func (p *pressureLog) droppedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.dropped)
}

// check returns history.Check of the polls, with every session required
// to be polled from from to to.
func (p *pressureLog) check(ids []string, from, to time.Time) history.Report {
	p.mu.Lock()
	h := history.History{Polls: append([]history.Poll(nil), p.polls...), End: to}
	p.mu.Unlock()
	for _, id := range ids {
		h.Spans = append(h.Spans, history.Span{Session: id, From: from, To: to})
	}
	return history.Check(h)
}

// membershipObserver counts the rounds that saw a new membership.
type membershipObserver struct {
	NopObserver
	changes atomic.Int64
}

func (o *membershipObserver) Round(r RoundReport) {
	if r.MembershipChanged {
		o.changes.Add(1)
	}
}

// expiries reads each worker's expiry (server ms) in the node index.
func expiries(t *testing.T, client redis.UniversalClient, workers []string) map[string]float64 {
	t.Helper()
	out := make(map[string]float64, len(workers))
	for _, w := range workers {
		score, err := client.ZScore(context.Background(), keyspace.Space{}.NodeIndex(), w).Result()
		if err == nil {
			out[w] = score
		}
	}
	return out
}

// heartbeatsOutlast reports whether every worker's expiry in the node
// index moved at least d past what it was in from: the workers kept
// heartbeating for d. It is how the tests keep Redis full "for as long as"
// several TTLs without reading a wall clock.
func heartbeatsOutlast(t *testing.T, client redis.UniversalClient, from map[string]float64, d time.Duration) bool {
	now := expiries(t, client, mapKeys(from))
	for w, was := range from {
		if now[w] < was+float64(d.Milliseconds()) {
			return false
		}
	}
	return true
}

func mapKeys(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// fillRedis sets maxmemory to 1 byte (noeviction: every write that
// allocates gets OOM) until the test ends or memory is given back.
func fillRedis(t *testing.T, client redis.UniversalClient) (giveBack func()) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, client.ConfigSet(ctx, "maxmemory", "1").Err())
	require.ErrorContains(t, client.Set(ctx, "probe", "x", 0).Err(), "OOM")
	var once sync.Once
	giveBack = func() { once.Do(func() { require.NoError(t, client.ConfigSet(ctx, "maxmemory", "0").Err()) }) }
	t.Cleanup(giveBack)
	return giveBack
}

// startGhost starts "ghost", which heartbeats like a worker (every 100ms,
// TTL 600ms) until the test ends but never takes a lease.
func startGhost(t *testing.T, client redis.UniversalClient) *nodes.Registry {
	t.Helper()
	ghost, err := nodes.New(nodes.Config{Client: client, ID: "ghost", TTL: 600 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = ghost.Heartbeat(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ghost
}

// TestMemoryPressureKeepsEveryonePolling (issue 22 item 10): three workers
// share the sessions; Redis is full (maxmemory 1 byte, noeviction) for
// longer than several lease and heartbeat TTLs. Heartbeats and renewals
// allocate nothing and keep passing, so no worker leaves, no lease is
// released or lost, and every session keeps being polled by its holder;
// the workers report not ready (nothing can be acquired), and once Redis
// has room they are ready again, with the same holders.
func TestMemoryPressureKeepsEveryonePolling(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	client := srv.Client(t)
	ids := addSessions(t, client, 30, 20*time.Millisecond)
	polls := &pressureLog{}
	obs := &membershipObserver{}
	workers := []string{"w1", "w2", "w3"}
	var rs []*running
	for _, id := range workers {
		cfg := fastConfig(client, id, polls.poller(id))
		cfg.Observer = withEvents{obs, polls.onEvent(id)}
		// The heartbeat TTL as long as the lease TTL (3 × 150ms by
		// default), so that a starved heartbeat on a loaded machine does
		// not read as a membership change; 4 lease TTLs below are still
		// several heartbeat TTLs.
		cfg.HeartbeatTTL = cfg.LeaseTTL
		// Round trips of 250 ms before a renewal reads as failed (100 ms
		// in fastConfig): a lease lost to a starved round trip is not what
		// this test is about.
		cfg.RenewInterval, cfg.RequestTimeout = 300*time.Millisecond, 250*time.Millisecond
		rs = append(rs, start(t, cfg))
	}
	require.Eventually(t, func() bool {
		owned := 0
		for _, r := range rs {
			st := r.c.Status()
			if !st.Ready || len(st.Owned) == 0 || len(st.Members) != len(workers) {
				return false
			}
			owned += len(st.Owned)
		}
		return owned == len(ids)
	}, 20*time.Second, 10*time.Millisecond, "every worker holds a share")
	before := owners(t, client, ids)

	giveBack := fillRedis(t, client)
	from, dropped, changes := time.Now(), polls.droppedCount(), obs.changes.Load()
	expiryAt := expiries(t, client, workers)
	require.Len(t, expiryAt, len(workers))
	ttl := fastConfig(client, "", nil).LeaseTTL // the longest TTL here (the heartbeat TTL too)
	require.Eventually(t, func() bool {
		return len(polls.droppedSince(dropped)) > 0 || obs.changes.Load() != changes || heartbeatsOutlast(t, client, expiryAt, 4*ttl)
	}, 30*time.Second, 20*time.Millisecond, "heartbeats stopped under memory pressure")
	to := time.Now()
	require.Empty(t, polls.droppedSince(dropped), "no lease released or lost while Redis is full")
	require.Equal(t, changes, obs.changes.Load(), "no membership change while Redis is full")
	for _, r := range rs {
		require.False(t, r.c.Ready(), "%s: nothing can be acquired: not ready", r.c.ID())
	}
	require.Equal(t, before, owners(t, client, ids), "no lease moved")
	for _, s := range polls.check(ids, from, to).Sessions {
		require.False(t, s.NeverPolled, s.Session)
		require.Less(t, s.MaxGap, 2*ttl, "%s kept being polled", s.Session)
	}

	giveBack()
	require.Eventually(t, func() bool {
		for _, r := range rs {
			if !r.c.Ready() {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, before, owners(t, client, ids), "the same holders once Redis has room")
	require.Zero(t, polls.check(ids, from, time.Now()).Totals().Overlaps)
}

// TestPollStatsFollowHandoffs (issue 22 item 12): a worker's Backoff
// and LeasesHeld count the sessions it polls now: those it handed off
// while they backed off after failed polls are not counted any more.
func TestPollStatsFollowHandoffs(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	ids := addSessions(t, client, 8, 20*time.Millisecond)
	failing := PollFunc(func(context.Context, *Turn) error { return errors.New("target down") })
	w1 := start(t, fastConfig(client, "w1", failing))
	require.Eventually(t, func() bool {
		return len(w1.c.Status().Owned) == len(ids) && w1.c.PollStats().Backoff == len(ids)
	}, 20*time.Second, 10*time.Millisecond, "w1 polls every session, all backing off")

	w2 := start(t, fastConfig(client, "w2", failing))
	require.Eventually(t, func() bool {
		owned1, owned2 := len(w1.c.Status().Owned), len(w2.c.Status().Owned)
		ps := w1.c.PollStats()
		return owned2 > 0 && owned1+owned2 == len(ids) && ps.Backoff <= owned1 && ps.LeasesHeld == owned1
	}, 20*time.Second, 10*time.Millisecond, "w1 counts only the sessions it still polls")
}
