package integration

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/session"
)

const (
	leaseTTL          = 3 * time.Second
	renewInterval     = time.Second
	discoveryInterval = time.Second
)

func addSessions(t *testing.T, redisURL, url string, n int, interval time.Duration) []string {
	t.Helper()
	srv := redistest.Client(t, redisURL)
	store, err := session.NewStore(srv, keyspace.Space{})
	require.NoError(t, err)
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("session-%d", i)
		require.NoError(t, store.Put(context.Background(), session.Session{ID: ids[i], URL: url + "/" + ids[i], Interval: session.Duration(interval)}))
	}
	return ids
}

// lastPollers maps each session to the worker of its latest poll after t.
func lastPollers(tg *target, after time.Time) map[string]string {
	ps := tg.since(after) // newest first
	out := map[string]string{}
	for _, p := range ps {
		if _, ok := out[p.session]; !ok {
			out[p.session] = p.worker
		}
	}
	return out
}

// takeover waits until every session in ids has been polled after t0 by a
// worker other than gone, and returns the largest gap from t0.
func takeover(t *testing.T, tg *target, ids []string, gone string, t0 time.Time, limit time.Duration) time.Duration {
	t.Helper()
	var gap time.Duration
	require.Eventually(t, func() bool {
		first := map[string]time.Time{}
		for _, p := range tg.since(t0) {
			if p.worker != gone {
				first[p.session] = p.at // newest first: ends on the earliest
			}
		}
		gap = 0
		for _, id := range ids {
			at, ok := first[id]
			if !ok {
				return false
			}
			gap = max(gap, at.Sub(t0))
		}
		return true
	}, limit, 20*time.Millisecond)
	return gap
}

// requireStaleBegunEarlier checks, then forgets, the requests the target
// rejected for a stale token so far. A request begun under a valid lease
// may reach the target after a successor's first request with a newer
// token: no lease can stop bytes already on their way, which is what
// fencing tokens are for. That happens to a paused worker (a request begun
// before SIGSTOP took effect), and to any worker whose request timed out on
// its side (the poll returned, so the lease was handed over) while the
// busy target had not yet read it. Each must have begun before the first
// accepted request with a newer token, where its record (the poll's start)
// is still in the capped results stream: call it after each phase.
func requireStaleBegunEarlier(t *testing.T, tg *target, redisURL string) {
	t.Helper()
	accepted := tg.since(time.Time{})
	stale := tg.staleRequests()
	trimmed := 0
	for _, p := range stale {
		started, ok := pollStart(t, redisURL, p)
		if !ok {
			// The results stream is capped (~10,000 entries, a few seconds
			// of a busy start): its record is gone, its start unknown.
			trimmed++
			continue
		}
		var first *poll // the first accepted request with a newer token
		for i, q := range accepted {
			if q.session == p.session && q.token > p.token && (first == nil || q.at.Before(first.at)) {
				first = &accepted[i]
			}
		}
		require.NotNil(t, first, "stale poll %+v without a newer accepted one", p)
		require.True(t, started.Before(first.at), "stale poll %+v started at %v, after %s polled with newer token %d at %v", p, started, first.worker, first.token, first.at)
	}
	if len(stale) > 0 {
		t.Logf("%d stale requests rejected by their fencing token; %d checked to have begun before the newer token's first request, %d no longer in the capped results stream",
			len(stale), len(stale)-trimmed, trimmed)
	}
	tg.mu.Lock()
	tg.stale = tg.stale[len(stale):]
	tg.mu.Unlock()
}

func sessionsOf(m map[string]string, w string) []string {
	var out []string
	for s, o := range m {
		if o == w {
			out = append(out, s)
		}
	}
	return out
}

// TestAcceptance is the core issue's acceptance run: three workers, 300
// sessions every 200ms, then SIGTERM, kill -9 and SIGSTOP of workers, with
// every poll checked by the fence-checking target.
func TestAcceptance(t *testing.T) {
	rds := startRedis(t)
	tg := newTarget(t)
	ids := addSessions(t, rds.URL(), tg.URL, 300, 200*time.Millisecond)

	w := map[string]*worker{}
	for _, id := range []string{"w1", "w2", "w3"} {
		w[id] = startWorker(t, rds.URL(), id)
	}

	// Every session polled, spread within ±15 % of even.
	var owners map[string]string
	require.Eventually(t, func() bool {
		owners = lastPollers(tg, time.Now().Add(-400*time.Millisecond))
		if len(owners) != len(ids) {
			t.Logf("polled recently: %d of %d", len(owners), len(ids))
			return false
		}
		for _, id := range []string{"w1", "w2", "w3"} {
			if n := len(sessionsOf(owners, id)); n < 85 || n > 115 {
				return false
			}
		}
		return true
	}, 20*time.Second, 100*time.Millisecond)
	for _, id := range []string{"w1", "w2", "w3"} {
		t.Logf("%s polls %d sessions", id, len(sessionsOf(owners, id)))
	}
	requireStaleBegunEarlier(t, tg, rds.URL()) // while the start's records are in the capped stream

	// SIGTERM: a drain hands the sessions over without waiting for the TTL.
	moved := sessionsOf(owners, "w1")
	t0 := time.Now()
	w["w1"].signal(t, syscall.SIGTERM)
	gap := takeover(t, tg, moved, "w1", t0, 10*time.Second)
	t.Logf("SIGTERM: %d sessions polled again by the others within %v", len(moved), gap)
	require.Less(t, gap, leaseTTL, "graceful handoff must not wait for lease expiry")
	require.NoError(t, w["w1"].wait(t, 10*time.Second), "drain exits 0")

	// kill -9: takeover after the lease TTL plus one discovery interval.
	w["w4"] = startWorker(t, rds.URL(), "w4")
	require.Eventually(t, func() bool {
		return len(sessionsOf(lastPollers(tg, time.Now().Add(-400*time.Millisecond)), "w4")) > 50
	}, 20*time.Second, 100*time.Millisecond)
	owners = lastPollers(tg, time.Now().Add(-400*time.Millisecond))
	moved = sessionsOf(owners, "w2")
	t0 = time.Now()
	w["w2"].signal(t, syscall.SIGKILL)
	gap = takeover(t, tg, moved, "w2", t0, 20*time.Second)
	t.Logf("kill -9 at %s: %d sessions polled again within %v (TTL %v + discovery %v)", t0.UTC().Format("15:04:05.000"), len(moved), gap, leaseTTL, discoveryInterval)
	require.LessOrEqual(t, gap, leaseTTL+discoveryInterval+time.Second)
	requireStaleBegunEarlier(t, tg, rds.URL())

	// SIGSTOP longer than the TTL, then SIGCONT: the paused worker must not
	// poll again with a token older than one already seen (the target
	// rejects and records it).
	owners = lastPollers(tg, time.Now().Add(-400*time.Millisecond))
	moved = sessionsOf(owners, "w3")
	t0 = time.Now()
	w["w3"].signal(t, syscall.SIGSTOP)
	takeover(t, tg, moved, "w3", t0, 20*time.Second)
	require.Eventually(t, func() bool { return time.Since(t0) > leaseTTL+time.Second }, 10*time.Second, 50*time.Millisecond)
	w["w3"].signal(t, syscall.SIGCONT)
	resumed := time.Now()
	// w3 comes back, rejoins and takes its share again.
	require.Eventually(t, func() bool {
		return len(sessionsOf(lastPollers(tg, time.Now().Add(-400*time.Millisecond)), "w3")) > 50
	}, 20*time.Second, 100*time.Millisecond)
	t.Logf("SIGSTOP %v then SIGCONT: w3 back to %d sessions after %v", time.Since(t0).Round(time.Millisecond),
		len(sessionsOf(lastPollers(tg, time.Now().Add(-400*time.Millisecond)), "w3")), time.Since(resumed).Round(time.Millisecond))

	// Every session is still polled: w3 takes its share back by graceful
	// handoffs, some of which may be under way at the moment w3 passed 50
	// sessions (a loaded machine makes them slower, not fewer), so the
	// check waits for them rather than look at that one moment.
	require.Eventually(t, func() bool { return len(lastPollers(tg, time.Now().Add(-400*time.Millisecond))) == len(ids) },
		10*time.Second, 50*time.Millisecond, "every session still polled")

	// During the pause only w3 may send stale requests, and each must have
	// begun while its lease was still valid: before t0 + TTL - renew
	// interval - drift margin, the earliest its local deadline could be.
	// (SIGSTOP takes effect asynchronously, so "before t0" would be too
	// strict by a few ms.)
	earliestDeadline := t0.Add(leaseTTL - renewInterval - lease.DefaultDriftMargin(leaseTTL))
	pausedStale := 0
	for _, p := range tg.staleRequests() {
		if !p.at.After(t0) {
			continue
		}
		pausedStale++
		started, ok := pollStart(t, rds.URL(), p)
		require.True(t, ok, "no record of stale poll %+v", p)
		require.Equal(t, "w3", p.worker, "only the paused worker can be stale during the pause: %+v", p)
		require.True(t, started.Before(earliestDeadline), "stale poll %+v started at %v, after its lease deadline (at the earliest %v)", p, started, earliestDeadline)
		require.True(t, started.Before(resumed), "stale poll %+v started after SIGCONT", p)
	}
	requireStaleBegunEarlier(t, tg, rds.URL())
	t.Logf("%d stale requests during the pause, begun by w3 before it", pausedStale)

	tg.mu.Lock()
	tg.stale = nil
	tg.mu.Unlock()
	tg.check(t)
}

func TestBadConfigExitsWithOneLine(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"ttl below 3x renew", []string{"--lease-ttl", "20s", "--renew-interval", "10s"}, "lease-ttl"},
		{"negative duration", []string{"--discovery-interval", "-1s"}, "discovery-interval"},
		{"bad url", []string{"--redis-url", "http://127.0.0.1:1"}, "redis-url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := pollworker(t, append([]string{"run", "--http-addr", ""}, tt.args...)...)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, out)
			require.NotZero(t, exit.ExitCode())
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 1, out)
			require.Contains(t, lines[0], tt.want)
		})
	}
}

func TestStartsWithRedisDownAndPollsWhenItComesUp(t *testing.T) {
	port := redistest.FreePort(t)
	httpPort := redistest.FreePort(t)
	redisURL := "redis://127.0.0.1:" + strconv.Itoa(port)
	tg := newTarget(t)
	startWorker(t, redisURL, "late", "--http-addr", "127.0.0.1:"+strconv.Itoa(httpPort))
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	status := func(path string) int {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Eventually(t, func() bool { return status("/healthz") == http.StatusOK }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, http.StatusServiceUnavailable, status("/readyz"))
	require.Empty(t, tg.since(time.Time{}), "nothing polled while Redis is down")

	redistest.StartPort(t, port)
	ids := addSessions(t, redisURL, tg.URL, 5, 100*time.Millisecond)
	require.Eventually(t, func() bool { return status("/readyz") == http.StatusOK }, 15*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return len(lastPollers(tg, time.Time{})) == len(ids) }, 15*time.Second, 50*time.Millisecond)
	tg.check(t)
}
