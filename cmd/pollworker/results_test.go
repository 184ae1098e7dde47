package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

// addResult writes one result entry as a worker would.
func addResult(t *testing.T, c *redis.Client, stream, session string, status int, at time.Time) {
	t.Helper()
	require.NoError(t, c.XAdd(ctxT(t), &redis.XAddArgs{Stream: stream, Values: []any{
		"session", session, "worker", "w1", "token", 4, "status", status, "latency_ms", "2.500", "error", "", "at", at.UnixMilli(),
	}}).Err())
}

func TestResultsCommand(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	keys := keyspace.Space{}
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	// Written out of order over both layouts.
	addResult(t, c, keys.ResultStreamOf("b"), "b", 200, base.Add(2*time.Second))
	addResult(t, c, keys.Results(), "a", 503, base.Add(time.Second))
	addResult(t, c, keys.ResultStreamOf("c"), "c", 200, base.Add(3*time.Second))

	res := runApp(t, "results", "--redis-url", srv.URL())
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Equal(t,
		"2030-01-02T03:04:06.000Z session=a worker=w1 token=4 status=503 latency=2.5ms\n"+
			"2030-01-02T03:04:07.000Z session=b worker=w1 token=4 status=200 latency=2.5ms\n"+
			"2030-01-02T03:04:08.000Z session=c worker=w1 token=4 status=200 latency=2.5ms\n", res.stdout)

	res = runApp(t, "results", "--redis-url", srv.URL(), "--session", "b", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var got resultJSON
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &got))
	require.Equal(t, "b", got.Session)
	require.Equal(t, 2.5, got.LatencyMs)
	require.Equal(t, keys.ResultStreamOf("b"), got.Stream)

	// No result and no session of that id: say so, exit 1 (issue 22: it
	// printed nothing, exit 0). A removed session's results are still shown.
	res = runApp(t, "results", "--redis-url", srv.URL(), "--session", "nope")
	require.Equal(t, exitFailure, res.code, res.stderr)
	require.Equal(t, "pollworker: results: no such session nope, and no results recorded for it (sessions list shows the sessions)\n", res.stderr)
	require.Empty(t, res.stdout)
	require.NoError(t, c.Set(ctxT(t), keys.Session("quiet"), `{"url":"http://127.0.0.1:1/","interval":"1s"}`, 0).Err())
	res = runApp(t, "results", "--redis-url", srv.URL(), "--session", "quiet")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Empty(t, res.stdout)

	res = runApp(t, "results", "--redis-url", srv.URL(), "--limit", "1")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Equal(t, 1, strings.Count(res.stdout, "\n"))
}

func TestResultsFollow(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	keys := keyspace.Space{}
	addResult(t, c, keys.Results(), "old", 200, time.Now())

	ctx, cancel := context.WithCancel(ctxT(t))
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"pollworker", "results", "--follow", "--redis-url", srv.URL()}, &stdout, &stderr, nil)
	}()
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "session=old") }, 10*time.Second, 5*time.Millisecond)
	addResult(t, c, keys.ResultStreamOf("new1"), "new1", 200, time.Now())
	addResult(t, c, keys.Results(), "new2", 200, time.Now())
	require.Eventually(t, func() bool {
		out := stdout.String()
		return strings.Contains(out, "session=new1") && strings.Contains(out, "session=new2")
	}, 10*time.Second, 5*time.Millisecond)
	cancel()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("results --follow did not stop")
	}
	require.Equal(t, 1, strings.Count(stdout.String(), "session=old"))
}

func TestResultsInvalidFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		give []string
		want string
	}{
		{name: "limit", give: []string{"--limit", "0"}, want: "--limit (0) must be from 1 to 100000"},
		{name: "since", give: []string{"--since", "-1s"}, want: "--since (-1s) must be from 0"},
		{name: "session", give: []string{"--session", "a b"}, want: "--session: invalid id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := runApp(t, append([]string{"results", "--redis-url", "redis://127.0.0.1:1"}, tt.give...)...)
			require.Equal(t, exitUsage, res.code)
			oneLine(t, res.stderr)
			require.Contains(t, res.stderr, tt.want)
		})
	}
}

func TestRunRecordFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		give []string
		want string
	}{
		{name: "mode", give: []string{"--record", "some"}, want: `--record "some" must be all, changes or none`},
		{name: "maxlen", give: []string{"--record-maxlen", "0"}, want: "--record-maxlen (0) must be from 1"},
		{name: "flush", give: []string{"--record-flush", "0s"}, want: "--record-flush (0s) must be from 1ms to 1m0s"},
		{name: "queue", give: []string{"--record-queue", "-3"}, want: "--record-queue (-3) must be from 1"},
		{name: "body", give: []string{"--record-body", "70000"}, want: "--record-body (70000) must be from 0 to 65536"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := runApp(t, append([]string{"run", "--dry-run"}, tt.give...)...)
			require.Equal(t, exitUsage, res.code)
			oneLine(t, res.stderr)
			require.Contains(t, res.stderr, tt.want)
		})
	}
	res := runApp(t, "run", "--dry-run", "--record", "changes", "--record-maxlen", "5", "--record-flush", "1s", "--record-queue", "7", "--record-body", "512")
	require.Equal(t, exitOK, res.code, res.stderr)
}
