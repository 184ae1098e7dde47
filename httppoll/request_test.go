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
	for _, name := range []string{HeaderSession, HeaderWorker, HeaderToken, HeaderSlot, "User-Agent"} {
		require.Equal(t, http.CanonicalHeaderKey(name), name)
	}
}
