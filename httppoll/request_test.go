package httppoll

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// TestPollSendsTheSessionsRequest: method, headers and body of the session
// are sent; the fencing headers cannot be overridden by a session header
// (Validate refuses them; the Poller sets them last anyway).
func TestPollSendsTheSessionsRequest(t *testing.T) {
	f := newFixture(t)
	var (
		mu     sync.Mutex
		method string
		header http.Header
		body   string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		method, header, body = r.Method, r.Header.Clone(), string(b)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Client: f.client})
	s := sess(srv.URL, time.Second)
	s.Method, s.Body, s.Expect = "POST", `{"q":1}`, "201"
	s.Headers = map[string]string{"Content-Type": "application/json", "Accept": "application/json",
		HeaderToken: "999999", HeaderSession: "forged"}

	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil)))

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "POST", method)
	require.Equal(t, `{"q":1}`, body)
	require.Equal(t, "application/json", header.Get("Content-Type"))
	require.Equal(t, "application/json", header.Get("Accept"))
	require.Equal(t, []string{strconv.FormatInt(f.lease.Token(), 10)}, header.Values(HeaderToken))
	require.Equal(t, []string{"s1"}, header.Values(HeaderSession))
}

// TestPollSendsItsDeadline: X-Poll-Deadline is the wall-clock time the
// worker abandons the request, RequestTimeout after it began; a
// session header of that name does not override it. (A caller's earlier
// deadline would be the one sent.)
func TestPollSendsItsDeadline(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration
		timeout  time.Duration
		own      time.Duration // the session's Timeout
		want     time.Duration
	}{
		{name: "interval shorter", interval: 2 * time.Second, timeout: time.Minute, want: 2 * time.Second},
		{name: "timeout shorter", interval: time.Hour, timeout: 30 * time.Second, want: 30 * time.Second},
		{name: "the session's own", interval: time.Hour, timeout: 30 * time.Second, own: 45 * time.Second, want: 45 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			got := make(chan []string, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- r.Header.Values(HeaderDeadline)
			}))
			t.Cleanup(srv.Close)
			p := newPoller(t, Config{Client: f.client, Timeout: tt.timeout})
			s := sess(srv.URL, tt.interval)
			s.Timeout = session.Duration(tt.own)
			s.Headers = map[string]string{HeaderDeadline: "2999-01-01T00:00:00.000Z"}

			before := time.Now()
			require.NoError(t, p.Poll(t.Context(), poller.NewTurn(s, f.lease, nil))) // no deadline of its own
			after := time.Now()

			values := <-got
			require.Len(t, values, 1)
			deadline, err := time.Parse(DeadlineFormat, values[0])
			require.NoError(t, err, values[0])
			// The value is truncated to the millisecond.
			require.False(t, deadline.Before(before.Add(tt.want).Add(-time.Millisecond)), "deadline %v, began after %v", deadline, before)
			require.False(t, deadline.After(after.Add(tt.want)), "deadline %v, ended by %v", deadline, after)
		})
	}
}

func TestRequestTimeout(t *testing.T) {
	tests := []struct {
		name                     string
		interval, own, def, want time.Duration
	}{
		{"the worker's", time.Minute, 0, 10 * time.Second, 10 * time.Second},
		{"the session's, shorter", time.Minute, time.Second, 10 * time.Second, time.Second},
		{"the session's, longer", time.Minute, 30 * time.Second, 10 * time.Second, 30 * time.Second},
		{"the worker's, capped by the interval", 2 * time.Second, 0, 10 * time.Second, 2 * time.Second},
		{"the session's, capped by the interval", 2 * time.Second, 5 * time.Second, 10 * time.Second, 2 * time.Second},
		{"a schedule has no interval", 0, 0, 10 * time.Second, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := session.Session{Interval: session.Duration(tt.interval), Timeout: session.Duration(tt.own)}
			require.Equal(t, tt.want, RequestTimeout(s, tt.def))
		})
	}
}

// TestExpectedStatus: a 304 to a conditional request stands for a 200.
func TestExpectedStatus(t *testing.T) {
	tests := []struct {
		expect      string
		status      int
		conditional bool
		want        bool
	}{
		{"", 304, false, true},
		{"200-299", 304, true, true},
		{"200-299", 304, false, false},
		{"201", 304, true, false},
		{"", 401, false, false},
		{"", 503, false, false},
	}
	for _, tt := range tests {
		s := sess("http://x/", time.Second)
		s.Expect = tt.expect
		require.Equal(t, tt.want, expected(s, tt.status, tt.conditional), "%+v", tt)
	}
}

// TestHeaderNamesAreCanonical: request sets the fencing headers by map
// key, which only works for names in their canonical form.
func TestHeaderNamesAreCanonical(t *testing.T) {
	for _, name := range []string{HeaderSession, HeaderWorker, HeaderToken, HeaderSlot, HeaderDeadline, "User-Agent"} {
		require.Equal(t, http.CanonicalHeaderKey(name), name)
	}
}
