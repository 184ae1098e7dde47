package httppoll

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/results"
	"github.com/pollworker/pollworker/session"
)

// gate is an HTTP server that holds every request until opened, and counts
// the requests in flight per Host header.
type gate struct {
	*httptest.Server
	open chan struct{}
	once sync.Once

	mu       sync.Mutex
	inFlight map[string]int
	maxSeen  map[string]int
}

func newGate(t *testing.T) *gate {
	t.Helper()
	g := &gate{open: make(chan struct{}), inFlight: map[string]int{}, maxSeen: map[string]int{}}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.inFlight[r.Host]++
		g.maxSeen[r.Host] = max(g.maxSeen[r.Host], g.inFlight[r.Host])
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			g.inFlight[r.Host]--
			g.mu.Unlock()
		}()
		select {
		case <-g.open:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(g.Close)
	t.Cleanup(g.release) // before Close: it waits for the handlers
	return g
}

// release lets every request held, and every later one, through.
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) counts(host string) (inFlight, maxSeen int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight[host], g.maxSeen[host]
}

// TestMaxPerHost: with a limit of 3, 9 polls of one host never have more
// than 3 requests in flight there, while another host (the same server
// reached as localhost) is not held up by them.
func TestMaxPerHost(t *testing.T) {
	g := newGate(t)
	const limit, polls = 3, 9
	p := newPoller(t, Config{Record: results.RecordNone, MaxPerHost: limit})
	hostA := strings.TrimPrefix(g.URL, "http://")
	hostB := strings.Replace(hostA, "127.0.0.1", "localhost", 1)

	errs := make(chan error, polls+1)
	for i := range polls {
		s := session.Session{ID: fmt.Sprintf("a%d", i), URL: g.URL + "/", Interval: session.Duration(time.Minute)}
		go func() { errs <- p.Poll(ctxT(t), poller.NewTurn(s, nil, nil)) }()
	}
	require.Eventually(t, func() bool {
		n, _ := g.counts(hostA)
		return n == limit && p.Stats().HostWaits == polls-limit
	}, 5*time.Second, time.Millisecond, "3 in flight, 6 waiting for a slot")

	// Another host gets its own slots at once.
	sb := session.Session{ID: "b", URL: "http://" + hostB + "/", Interval: session.Duration(time.Minute)}
	go func() { errs <- p.Poll(ctxT(t), poller.NewTurn(sb, nil, nil)) }()
	require.Eventually(t, func() bool { n, _ := g.counts(hostB); return n == 1 }, 5*time.Second, time.Millisecond)

	g.release()
	for range polls + 1 {
		require.NoError(t, <-errs)
	}
	_, maxA := g.counts(hostA)
	require.Equal(t, limit, maxA)
	require.EqualValues(t, polls+1, p.Stats().Polls[OutcomeOK])
	require.EqualValues(t, polls-limit, p.Stats().HostWaits)
	p.hosts.mu.Lock()
	defer p.hosts.mu.Unlock()
	require.Empty(t, p.hosts.hosts, "idle hosts are forgotten")
}

// TestHostSlotWaitEnds: a poll waiting for a slot of its host stops
// waiting when its context ends (the lease stopped being held:
// cancelled) or when half its timeout passes: then it sends nothing and
// returns poller.ErrNoCapacity, no result and no failure (before, the wait
// was a timeout and a failure, which backed the session off).
func TestHostSlotWaitEnds(t *testing.T) {
	g := newGate(t)
	failures := &failureRecord{}
	p := newPoller(t, Config{Record: results.RecordNone, MaxPerHost: 1, Failures: failures})
	hold := session.Session{ID: "hold", URL: g.URL, Interval: session.Duration(time.Minute)}
	held := make(chan error, 1)
	go func() { held <- p.Poll(ctxT(t), poller.NewTurn(hold, nil, nil)) }()
	host := strings.TrimPrefix(g.URL, "http://")
	require.Eventually(t, func() bool { n, _ := g.counts(host); return n == 1 }, 5*time.Second, time.Millisecond)

	ctx, cancel := context.WithCancel(ctxT(t))
	waiting := make(chan error, 1)
	go func() {
		waiting <- p.Poll(ctx, poller.NewTurn(session.Session{ID: "w", URL: g.URL, Interval: session.Duration(time.Minute)}, nil, nil))
	}()
	require.Eventually(t, func() bool { return p.Stats().HostWaits == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-waiting, context.Canceled)
	require.EqualValues(t, 1, p.Stats().Polls[OutcomeCancelled])

	// It waits at most half its timeout (min(interval, Timeout)), so that
	// a request it sends has the other half.
	err := p.Poll(ctxT(t), poller.NewTurn(session.Session{ID: "t", URL: g.URL, Interval: session.Duration(200 * time.Millisecond)}, nil, nil))
	require.ErrorIs(t, err, poller.ErrNoCapacity)
	require.ErrorContains(t, err, "no slot of the host within 100ms")
	require.Zero(t, p.Stats().Polls[OutcomeTimeout])
	require.EqualValues(t, 1, p.Stats().NoSlot)
	require.Empty(t, failures.failing(), "waiting for a slot is no failure of the target")

	g.release()
	require.NoError(t, <-held)
	_, maxSeen := g.counts(host)
	require.Equal(t, 1, maxSeen)
}

// TestIdleConnectionsClose: the connections a burst opened close once
// unused for IdleConnTimeout, while one in steady use stays open; with a
// negative IdleConnTimeout they stay.
func TestIdleConnectionsClose(t *testing.T) {
	for _, tt := range []struct {
		name    string
		timeout time.Duration
		closes  bool
	}{
		{name: "closed after the timeout", timeout: 300 * time.Millisecond, closes: true},
		{name: "kept without a limit", timeout: -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			open := 0
			release := make(chan struct{})
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/burst" {
					<-release
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				mu.Lock()
				defer mu.Unlock()
				switch st {
				case http.StateNew:
					open++
				case http.StateClosed, http.StateHijacked:
					open--
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			conns := func() int { mu.Lock(); defer mu.Unlock(); return open }
			p, err := New(Config{Worker: "w1", Record: results.RecordNone, IdleConnTimeout: tt.timeout})
			require.NoError(t, err)
			t.Cleanup(p.CloseIdleConnections)

			// A burst of 8 polls at once opens 8 connections.
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = p.Poll(context.Background(), poller.NewTurn(session.Session{ID: fmt.Sprint("b", i), URL: srv.URL + "/burst", Interval: session.Duration(time.Minute)}, nil, nil))
				}()
			}
			require.Eventually(t, func() bool { return conns() == 8 }, 5*time.Second, time.Millisecond)
			close(release)
			wg.Wait()

			// Steady polling, one at a time, reuses one of them.
			deadline := time.Now().Add(3 * tt.timeout.Abs())
			if !tt.closes {
				deadline = time.Now().Add(time.Second)
			}
			for time.Now().Before(deadline) {
				require.NoError(t, p.Poll(context.Background(), poller.NewTurn(sess(srv.URL+"/steady", time.Minute), nil, nil)))
				if tt.closes && conns() == 1 {
					break
				}
				select {
				case <-time.After(20 * time.Millisecond): // the pace of the steady polls
				case <-t.Context().Done():
				}
			}
			if tt.closes {
				require.Equal(t, 1, conns(), "the burst's idle connections closed, the steady one kept")
			} else {
				require.Equal(t, 8, conns(), "no limit: every idle connection kept")
			}
		})
	}
}
