package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHealthHandler(t *testing.T) {
	var ready, behind atomic.Bool
	why := func() string {
		if behind.Load() {
			return "host-limit (host t:80): runs 10 of 20 polls/s due"
		}
		return ""
	}
	notReady := func() string {
		if ready.Load() {
			return ""
		}
		return "Redis is over maxmemory"
	}
	h := healthHandler(notReady, why, nil, nil, false)
	serve := func(method, path string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w.Code, w.Body.String()
	}
	tests := []struct {
		name     string
		ready    bool
		behind   bool
		method   string
		path     string
		wantCode int
		wantBody string
	}{
		{name: "alive when not ready", path: "/healthz", wantCode: http.StatusOK, wantBody: "ok\n"},
		{name: "alive when ready", ready: true, path: "/healthz", wantCode: http.StatusOK, wantBody: "ok\n"},
		{name: "not ready", path: "/readyz", wantCode: http.StatusServiceUnavailable, wantBody: "not ready: Redis is over maxmemory\n"},
		{name: "ready", ready: true, path: "/readyz", wantCode: http.StatusOK, wantBody: "ready\n"},
		{name: "ready and behind", ready: true, behind: true, path: "/readyz", wantCode: http.StatusOK,
			wantBody: "ready, but behind: this worker cannot keep up with its share: host-limit (host t:80): runs 10 of 20 polls/s due (pollworker_behind)\n"},
		{name: "not ready and behind", behind: true, path: "/readyz", wantCode: http.StatusServiceUnavailable, wantBody: "not ready: Redis is over maxmemory\n"},
		{name: "head", ready: true, method: http.MethodHead, path: "/readyz", wantCode: http.StatusOK},
		{name: "post", method: http.MethodPost, path: "/readyz", wantCode: http.StatusMethodNotAllowed},
		{name: "other path", path: "/", wantCode: http.StatusNotFound},
		{name: "no profiles without --pprof", path: "/debug/pprof/", wantCode: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready.Store(tt.ready)
			behind.Store(tt.behind)
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			code, body := serve(method, tt.path)
			require.Equal(t, tt.wantCode, code)
			if tt.wantBody != "" {
				require.Equal(t, tt.wantBody, body)
			}
		})
	}
}

// TestHealthHandlerProfiles: --pprof serves Go's profiles beside the probes.
func TestHealthHandlerProfiles(t *testing.T) {
	h := healthHandler(func() string { return "" }, nil, nil, nil, true)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, w.Code, path)
		require.NotEmpty(t, w.Body.String(), path)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, "ready\n", w.Body.String())
}

// TestReadinessPingsAtMostOnceASecond: probes share one PING per
// readyPingEvery; a failed PING makes the worker not ready even while the
// coordinator still says ready; a coordinator that is not ready costs no
// PING.
func TestReadinessPingsAtMostOnceASecond(t *testing.T) {
	now := time.Unix(1000, 0)
	var pings atomic.Int32
	var pingErr atomic.Value
	pingErr.Store(errors.New("none"))
	var coord atomic.Bool
	coord.Store(true)
	r := &readiness{
		coordinator: func() string {
			if coord.Load() {
				return ""
			}
			return "no heartbeat written yet"
		},
		ping: func(ctx context.Context) error {
			pings.Add(1)
			_, ok := ctx.Deadline()
			require.True(t, ok, "the PING is bounded")
			if err := pingErr.Load().(error); err.Error() != "none" {
				return err
			}
			return nil
		},
		now: func() time.Time { return now },
	}
	for range 100 {
		require.True(t, r.Ready())
	}
	require.Equal(t, int32(1), pings.Load())

	pingErr.Store(errors.New("connection refused"))
	require.True(t, r.Ready(), "the cached PING is less than a second old")
	now = now.Add(readyPingEvery)
	require.Equal(t, "Redis does not answer PING: connection refused", r.NotReady())
	require.Equal(t, int32(2), pings.Load())

	coord.Store(false)
	now = now.Add(time.Hour)
	require.Equal(t, "no heartbeat written yet", r.NotReady(), "the coordinator's reason first, without a PING")
	require.Equal(t, int32(2), pings.Load())
}

// TestDefaultGCPercent: a worker runs with GOGC 75 unless the environment
// sets GOGC, whose value then stays.
func TestDefaultGCPercent(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	require.Equal(t, defaultGCPercent, setDefaultGCPercent(func(string) string { return "" }))
	require.Equal(t, defaultGCPercent, debug.SetGCPercent(defaultGCPercent))

	debug.SetGCPercent(150) // as the runtime does for GOGC=150
	require.Equal(t, 150, setDefaultGCPercent(func(k string) string { return map[string]string{"GOGC": "150"}[k] }))
	require.Equal(t, 150, debug.SetGCPercent(150), "left as the environment set it")
}
