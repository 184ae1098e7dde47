package poller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/faultproxy"
	"github.com/pollworker/pollworker/internal/redistest"
)

// TestTimingsFollowLeaseTTL: the timings left zero follow LeaseTTL, so
// that setting LeaseTTL alone sets the crash failover bound; the defaults
// at DefaultLeaseTTL are the Default* constants, and a timing set
// explicitly is kept.
func TestTimingsFollowLeaseTTL(t *testing.T) {
	type timings struct {
		renew, heartbeat, heartbeatTTL, discovery, orphan, failover time.Duration
	}
	tests := []struct {
		name string
		give Config
		want timings
	}{
		{"defaults", Config{}, timings{10 * time.Second, 10 * time.Second, 30 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second}},
		{"lease ttl 3s", Config{LeaseTTL: 3 * time.Second},
			timings{time.Second, time.Second, 3 * time.Second, time.Second, 2 * time.Second, 4 * time.Second}},
		{"lease ttl 90s: discovery stays at most 10s", Config{LeaseTTL: 90 * time.Second},
			timings{30 * time.Second, 30 * time.Second, 90 * time.Second, 10 * time.Second, 20 * time.Second, 100 * time.Second}},
		{"explicit heartbeat interval", Config{LeaseTTL: 3 * time.Second, HeartbeatInterval: 2 * time.Second},
			timings{time.Second, 2 * time.Second, 6 * time.Second, time.Second, 2 * time.Second, 7 * time.Second}},
		{"explicit everything", Config{LeaseTTL: 3 * time.Second, RenewInterval: 500 * time.Millisecond, HeartbeatInterval: 400 * time.Millisecond,
			HeartbeatTTL: 2 * time.Second, DiscoveryInterval: 5 * time.Second, OrphanGrace: 7 * time.Second},
			timings{500 * time.Millisecond, 400 * time.Millisecond, 2 * time.Second, 5 * time.Second, 7 * time.Second, 8 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.give.WithDefaults()
			got := timings{c.RenewInterval, c.HeartbeatInterval, c.HeartbeatTTL, c.DiscoveryInterval, c.OrphanGrace, c.FailoverBound()}
			require.Equal(t, tt.want, got)
			require.NoError(t, c.validateTimes())
			require.Equal(t, tt.want.failover, tt.give.FailoverBound(), "the same without WithDefaults")
		})
	}
}

// TestOnlyLeaseTTLIsAValidConfig: an embedder who sets LeaseTTL alone
// (shorter than the 30s default, whose RenewInterval is 10s) gets a
// working configuration, not a rule about RenewInterval.
func TestOnlyLeaseTTLIsAValidConfig(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	p := PollFunc(func(context.Context, *Turn) error { return nil })
	c, err := New(Config{Client: client, Poller: p, LeaseTTL: 3 * time.Second})
	require.NoError(t, err)
	require.Equal(t, 4*time.Second, c.cfg.FailoverBound())
}

// TestCrashFailoverWithinTheBoundOfLeaseTTL: with only LeaseTTL set (3s),
// the sessions of a worker that crashes (cut off from Redis: no release,
// no leave) are polled by its peer within FailoverBound (4s), not after
// the 30s heartbeat TTL or the 20s orphan grace of fixed defaults. The
// check allows generous slack over the bound, for a loaded machine: what
// it tells apart is seconds against tens of seconds.
func TestCrashFailoverWithinTheBoundOfLeaseTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	proxy, err := faultproxy.Start(srv.Addr())
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = viaProxy.Close() })
	ids := addSessions(t, client, 20, 200*time.Millisecond)

	const ttl = 3 * time.Second
	rec := newRecorder()
	taken := newFirstPolls()
	a := start(t, Config{Client: viaProxy, ID: "a", Poller: rec.poller("a"), LeaseTTL: ttl})
	start(t, Config{Client: client, ID: "b", Poller: taken.wrap(rec.poller("b")), LeaseTTL: ttl})
	bound := a.c.cfg.FailoverBound()
	require.Equal(t, 4*time.Second, bound, "LeaseTTL + LeaseTTL/3")

	var ofA []string
	require.Eventually(t, func() bool {
		last := rec.lastPoller()
		ofA = ofA[:0]
		for _, id := range ids {
			switch last[id] {
			case "":
				return false
			case "a":
				ofA = append(ofA, id)
			}
		}
		return len(ofA) > 0 && len(ofA) < len(ids)
	}, 20*time.Second, 10*time.Millisecond, "a and b share the sessions")

	proxy.Partition() // a "crashes": it neither renews, nor heartbeats, nor releases
	cut := time.Now()
	taken.reset()
	slack := 2 * ttl
	require.Eventually(t, func() bool { return taken.all(ofA) }, bound+slack, 10*time.Millisecond,
		"b polls a's %d sessions within the failover bound %v (+%v slack)", len(ofA), bound, slack)
	t.Logf("a's %d sessions polled by b %v after the cut (bound %v)", len(ofA), taken.latest(ofA).Sub(cut).Round(time.Millisecond), bound)
	rec.check(t)
}

// firstPolls records when a worker first polled each session since reset.
type firstPolls struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func newFirstPolls() *firstPolls { return &firstPolls{first: map[string]time.Time{}} }

func (f *firstPolls) wrap(p Poller) Poller {
	return PollFunc(func(ctx context.Context, tn *Turn) error {
		s := tn.Session()
		f.mu.Lock()
		if _, ok := f.first[s.ID]; !ok {
			f.first[s.ID] = time.Now()
		}
		f.mu.Unlock()
		return p.Poll(ctx, tn)
	})
}

func (f *firstPolls) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.first)
}

func (f *firstPolls) all(ids []string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if _, ok := f.first[id]; !ok {
			return false
		}
	}
	return true
}

func (f *firstPolls) latest(ids []string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var last time.Time
	for _, id := range ids {
		if f.first[id].After(last) {
			last = f.first[id]
		}
	}
	return last
}
