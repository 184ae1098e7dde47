package httppoll

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/results"
	"github.com/pollworker/pollworker/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var keys = keyspace.Space{}

// fixture is a miniredis, a client for it and a lease on session s1 held by
// worker w1.
type fixture struct {
	mr     *miniredis.Miniredis
	client *redis.Client
	lease  *lease.Lease
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	mr := miniredis.RunT(t)
	c := newClient(t, mr.Addr())
	m, err := lease.New(lease.Config{Client: c, Holder: "w1", TTL: time.Minute, LossQuarantine: -1})
	require.NoError(t, err)
	res := m.Acquire(ctxT(t), []string{"s1"})
	require.NoError(t, res[0].Err)
	require.NotNil(t, res[0].Lease)
	t.Cleanup(func() { _ = m.ReleaseAll(context.Background()) })
	return &fixture{mr: mr, client: c, lease: res[0].Lease}
}

// newClient returns a client that neither retries nor redials, so that
// failures are quick (the one helper every package's tests share).
func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	return redistest.NewClient(t, addr)
}

func newPoller(t *testing.T, cfg Config) *Poller {
	t.Helper()
	if cfg.Worker == "" {
		cfg.Worker = "w1"
	}
	p, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(p.CloseIdleConnections)
	return p
}

// failureRecord is a FailureTracker that keeps each session's last state.
type failureRecord struct {
	mu   sync.Mutex
	last map[string]failureEntry
}

type failureEntry struct {
	token int64 // of the lease polled under
	st    State
}

// tokenOf is t's token, 0 for nil.
func tokenOf(t *poller.Turn) int64 {
	if t == nil {
		return 0
	}
	return t.Token()
}

func (f *failureRecord) Update(id string, t *poller.Turn, st State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last = map[string]failureEntry{}
	}
	f.last[id] = failureEntry{token: tokenOf(t), st: st}
}

func (f *failureRecord) Failures(id string, t *poller.Turn) (int, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.last[id]; ok && e.token == tokenOf(t) {
		return e.st.Failures, e.st.FailingSince
	}
	return 0, time.Time{}
}

// failing are the sessions whose last poll failed, in order.
func (f *failureRecord) failing() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for id, e := range f.last {
		if e.st.Failures > 0 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func sess(url string, interval time.Duration) session.Session {
	return session.Session{ID: "s1", URL: url, Interval: session.Duration(interval)}
}

// results reads the whole results stream.
func recorded(t *testing.T, c *redis.Client) []map[string]any {
	t.Helper()
	msgs, err := c.XRange(ctxT(t), keys.Results(), "-", "+").Result()
	require.NoError(t, err)
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		out[i] = m.Values
	}
	return out
}

func TestNew(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	tests := []struct {
		name string
		give Config
		want string // "" for success
	}{
		{name: "defaults", give: Config{Client: c, Worker: "w1"}},
		{name: "no client", give: Config{Worker: "w1"}, want: "Client is required"},
		{name: "no worker", give: Config{Client: c}, want: "Worker"},
		{name: "bad worker", give: Config{Client: c, Worker: "a b"}, want: "Worker"},
		{name: "bad keys", give: Config{Client: c, Worker: "w1", Keys: keyspace.Space{Prefix: "x", SessionPrefix: "x"}}, want: "Keys"},
		{name: "negative timeout", give: Config{Client: c, Worker: "w1", Timeout: -1}, want: "Timeout must be positive"},
		{name: "negative maxlen", give: Config{Client: c, Worker: "w1", StreamMaxLen: -1}, want: "StreamMaxLen must be positive"},
		{name: "negative record timeout", give: Config{Client: c, Worker: "w1", RecordTimeout: -1}, want: "RecordTimeout must be positive"},
		{name: "negative state refresh", give: Config{Client: c, Worker: "w1", StateRefresh: -1}, want: "StateRefresh must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.give)
			if tt.want == "" {
				require.NoError(t, err)
				require.Equal(t, DefaultTimeout, p.cfg.Timeout)
				require.EqualValues(t, results.DefaultStreamMaxLen, p.cfg.StreamMaxLen)
				require.NotNil(t, p.cfg.HTTP)
				return
			}
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestPollSendsHeadersAndRecords(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var got http.Header
	var method string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got, method = r.Header.Clone(), r.Method
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	p := newPoller(t, Config{Client: f.client, Clock: clocktesting.NewFakePassiveClock(at)})

	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL+"/x", time.Second), f.lease, nil)))

	mu.Lock()
	require.Equal(t, http.MethodGet, method)
	require.Equal(t, "s1", got.Get(HeaderSession))
	require.Equal(t, "w1", got.Get(HeaderWorker))
	require.Equal(t, strconv.FormatInt(f.lease.Token(), 10), got.Get(HeaderToken))
	require.Equal(t, DefaultUserAgent, got.Get("User-Agent"))
	mu.Unlock()

	require.Equal(t, []map[string]any{{
		"session": "s1", "worker": "w1", "token": strconv.FormatInt(f.lease.Token(), 10), "status": "200",
		"latency_ms": "0.000", "error": "", "at": "1893553445000", "changed": "1", "body_sha256": sha256Hex("ok"),
	}}, recorded(t, f.client), "a session's first poll is a change")
}

func TestPollStatus(t *testing.T) {
	tests := []struct {
		name    string
		give    int
		expect  string
		wantErr string
	}{
		{name: "ok", give: http.StatusOK},
		{name: "not modified", give: http.StatusNotModified},
		{name: "client error fails", give: http.StatusNotFound, wantErr: "unexpected status: 404 Not Found (expect 200-399)"},
		{name: "unauthorized fails", give: http.StatusUnauthorized, wantErr: "unexpected status: 401"},
		{name: "forbidden fails", give: http.StatusForbidden, wantErr: "unexpected status: 403"},
		{name: "method not allowed fails", give: http.StatusMethodNotAllowed, wantErr: "unexpected status: 405"},
		{name: "expected 404", give: http.StatusNotFound, expect: "404"},
		{name: "200 not expected", give: http.StatusOK, expect: "201", wantErr: "unexpected status: 200 OK (expect 201)"},
		{name: "server error", give: http.StatusServiceUnavailable, wantErr: "server error: 503"},
		{name: "internal error", give: http.StatusInternalServerError, wantErr: "server error: 500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.give)
			}))
			t.Cleanup(srv.Close)
			p := newPoller(t, Config{Client: f.client})

			s := sess(srv.URL, time.Second)
			s.Expect = tt.expect
			err := p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil))

			res := recorded(t, f.client)
			require.Len(t, res, 1)
			require.Equal(t, strconv.Itoa(tt.give), res[0]["status"])
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, "", res[0]["error"])
				return
			}
			var se *StatusError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tt.give, se.Code)
			require.Contains(t, res[0]["error"], tt.wantErr)
		})
	}
}

func TestPollCancelAbortsRequest(t *testing.T) {
	f := newFixture(t)
	entered := make(chan struct{})
	aborted := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done() // the client went away
		close(aborted)
	}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Client: f.client})

	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- p.Poll(ctx, poller.NewTurn(sess(srv.URL, time.Hour), f.lease, nil)) }()
	<-entered
	cancel()

	var err error
	require.Eventually(t, func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	}, 5*time.Second, time.Millisecond)
	require.ErrorIs(t, err, context.Canceled)
	require.Eventually(t, func() bool {
		select {
		case <-aborted:
			return true
		default:
			return false
		}
	}, 5*time.Second, time.Millisecond, "the server saw the request aborted")

	// The aborted poll is recorded although its context was cancelled.
	res := recorded(t, f.client)
	require.Len(t, res, 1)
	require.Equal(t, "0", res[0]["status"])
	require.Contains(t, res[0]["error"], "context canceled")
}

func TestPollTimeoutIsInterval(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Client: f.client})

	// The interval (20ms) bounds the request; the test context (10s) and the
	// default timeout (10s) do not come into play.
	err := p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, 20*time.Millisecond), f.lease, nil))
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// Config.Timeout bounds it when shorter than the interval.
	p = newPoller(t, Config{Client: f.client, Timeout: 20 * time.Millisecond})
	err = p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, time.Hour), f.lease, nil))
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// countingTransport counts the body bytes read by the client and whether the
// body was closed.
type countingTransport struct {
	base http.RoundTripper

	mu     sync.Mutex
	read   int
	closed bool
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, t: c}
	return resp, nil
}

type countingBody struct {
	io.ReadCloser
	t *countingTransport
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.t.mu.Lock()
	b.t.read += n
	b.t.mu.Unlock()
	return n, err
}

func (b *countingBody) Close() error {
	b.t.mu.Lock()
	b.t.closed = true
	b.t.mu.Unlock()
	return b.ReadCloser.Close()
}

func TestPollReadsAtMost64KiB(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := strings.Repeat("x", 32<<10)
		for range 32 { // 1 MiB
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	ct := &countingTransport{base: base}
	p := newPoller(t, Config{Client: f.client, HTTP: &http.Client{Transport: ct}})

	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, time.Second), f.lease, nil)))
	ct.mu.Lock()
	defer ct.mu.Unlock()
	require.Equal(t, MaxBodyBytes, ct.read)
	require.True(t, ct.closed)
}

func TestPollErrorsHideURL(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	addr := srv.Listener.Addr().String()
	srv.Close() // nothing listens there any more

	p := newPoller(t, Config{Client: f.client})
	err := p.Poll(ctxT(t), poller.NewTurn(sess("http://user:hunter2@"+addr+"/?apikey=s3cret", time.Second), f.lease, nil))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
	require.NotContains(t, err.Error(), "s3cret")
	require.Contains(t, err.Error(), "poll s1: Get: ")

	res := recorded(t, f.client)
	require.Len(t, res, 1)
	require.NotContains(t, res[0]["error"], "s3cret")
	require.NotContains(t, res[0]["error"], "hunter2")
}

func TestPollNilLease(t *testing.T) {
	f := newFixture(t)
	tokens := make(chan []string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokens <- r.Header.Values(HeaderToken)
	}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Client: f.client})

	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, time.Second), nil, nil)))
	require.Empty(t, <-tokens)
	require.Equal(t, "0", recorded(t, f.client)[0]["token"])
}

func TestStreamIsCapped(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Client: f.client, StreamMaxLen: 5})
	for range 12 {
		require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, time.Second), f.lease, nil)))
	}
	n, err := f.client.XLen(ctxT(t), keys.Results()).Result()
	require.NoError(t, err)
	require.LessOrEqual(t, n, int64(5))
}

func TestRecordingFailureIsLoggedNotReturned(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	down := newClient(t, "127.0.0.1:1") // nothing listens on port 1
	core, logs := observer.New(zapcore.DebugLevel)
	p := newPoller(t, Config{Client: down, Logger: zap.New(core), RecordTimeout: time.Second})

	for range 3 {
		require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, time.Second), f.lease, nil)))
	}
	require.Equal(t, 1, logs.FilterLevelExact(zapcore.WarnLevel).Len(), "warned once")
	require.Equal(t, 2, logs.FilterLevelExact(zapcore.DebugLevel).Len())

	// Recording works again: said once.
	p.cfg.Client = f.client
	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, time.Second), f.lease, nil)))
	require.Equal(t, 1, logs.FilterMessage("recording poll results works again").Len())
}

func TestPollBadURL(t *testing.T) {
	f := newFixture(t)
	p := newPoller(t, Config{Client: f.client})
	err := p.Poll(ctxT(t), poller.NewTurn(session.Session{ID: "s1", URL: "ftp://example.invalid/", Interval: session.Duration(time.Second)}, f.lease, nil))
	require.Error(t, err)
	require.Contains(t, err.Error(), "unsupported protocol scheme")
	require.Len(t, recorded(t, f.client), 1)
}

// runStoppable starts run in a goroutine and returns a func (also run at
// cleanup) that cancels its context and waits for it to return nil.
func runStoppable(t *testing.T, name string, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal(name + " did not return")
		}
	})
	t.Cleanup(stop)
	return stop
}
