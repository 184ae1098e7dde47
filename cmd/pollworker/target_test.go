package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/httppoll"
)

// TestTargetLogsPolls: pollworker target answers on a loopback port and
// prints one line per poll with the X-Poll-* headers, answering a token
// below the highest seen for the session, or read after its
// X-Poll-Deadline, with 409 (issue 22: the README's
// example URLs only produced DNS errors; a newcomer needs a target to
// start).
func TestTargetLogsPolls(t *testing.T) {
	var out syncBuffer
	at := time.Date(2026, 11, 25, 22, 0, 0, 0, time.UTC)
	h := &pollTarget{out: &out, status: http.StatusOK, now: func() time.Time { return at }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- serveTarget(ctx, ln, h) }()

	poll := func(session, token string, deadline ...time.Time) int {
		req, err := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/health", nil)
		require.NoError(t, err)
		req.Header.Set(httppoll.HeaderSession, session)
		req.Header.Set(httppoll.HeaderWorker, "w1")
		req.Header.Set(httppoll.HeaderToken, token)
		if session == "cron-1" {
			req.Header.Set(httppoll.HeaderSlot, "2026-11-25T22:00:00Z")
		}
		for _, d := range deadline {
			req.Header.Set(httppoll.HeaderDeadline, d.UTC().Format(httppoll.DeadlineFormat))
		}
		resp, err := httpClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, poll("api-1", "7"))
	require.Equal(t, http.StatusOK, poll("api-1", "8"))
	require.Equal(t, http.StatusConflict, poll("api-1", "6"))
	require.Equal(t, http.StatusOK, poll("api-2", "1"))
	require.Equal(t, http.StatusOK, poll("cron-1", "3"))
	require.Equal(t, http.StatusOK, poll("api-2", "2", at.Add(time.Second)))
	require.Equal(t, http.StatusConflict, poll("api-2", "9", at.Add(-250*time.Millisecond)))
	require.Equal(t, http.StatusOK, poll("api-2", "3")) // 9 was not remembered
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, strings.Join([]string{
		"22:00:00.000 GET /health session=api-1 worker=w1 token=7 -> 200",
		"22:00:00.000 GET /health session=api-1 worker=w1 token=8 -> 200",
		"22:00:00.000 GET /health session=api-1 worker=w1 token=6 -> 409 stale token (highest seen 8)",
		"22:00:00.000 GET /health session=api-2 worker=w1 token=1 -> 200",
		"22:00:00.000 GET /health session=cron-1 worker=w1 token=3 slot=2026-11-25T22:00:00Z -> 200",
		"22:00:00.000 GET /health session=api-2 worker=w1 token=2 -> 200",
		"22:00:00.000 GET /health session=api-2 worker=w1 token=9 -> 409 past its deadline by 250ms",
		"22:00:00.000 GET /health session=api-2 worker=w1 token=3 -> 200",
	}, "\n")+"\n", out.String())
}

// TestTargetFlags: target listens on loopback only, with a status from 200
// to 599 and a delay up to 1m; anything else exits 2 naming the rule.
func TestTargetFlags(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"--addr", "0.0.0.0:18080"}, `pollworker: invalid config: target: --addr "0.0.0.0:18080" must be on a loopback address (127.0.0.1, ::1 or localhost)` + "\n"},
		{[]string{"--addr", "18080"}, `pollworker: invalid config: target: --addr "18080" must be host:port` + "\n"},
		{[]string{"--status", "99"}, "pollworker: invalid config: target: --status (99) must be from 200 to 599\n"},
		{[]string{"--delay", "2m"}, "pollworker: invalid config: target: --delay (2m0s) must be from 0 to 1m\n"},
	}
	for _, tt := range tests {
		r := runApp(t, append([]string{"target"}, tt.give...)...)
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Equal(t, tt.want, r.stderr)
	}
}
