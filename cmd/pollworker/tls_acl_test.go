package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

// runWorkerUntilLease starts `pollworker run` with args, waits until it
// holds the lease of session c1 and returns a stop function.
func runWorkerUntilLease(t *testing.T, args []string, holds func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	var stdout, stderr syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, append([]string{"pollworker", "run"}, args...), &stdout, &stderr, nil) }()
	require.Eventually(t, holds, 15*time.Second, 20*time.Millisecond, "worker log: %s", stderr.String())
	cancel()
	select {
	case code := <-exited:
		require.Equal(t, exitOK, code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not drain")
	}
	require.NotContains(t, stderr.String(), "NOPERM")
}

// TestTLSWithClientCertificate runs sessions and a worker against a
// redis-server that only accepts TLS with a client certificate.
func TestTLSWithClientCertificate(t *testing.T) {
	srv, certs := redistest.StartTLS(t)
	tlsFlags := []string{"--redis-url", srv.URL(), "--redis-tls-ca", certs.CA,
		"--redis-tls-cert", certs.ClientCert, "--redis-tls-key", certs.ClientKey}
	r := runApp(t, append(append([]string{"sessions"}, tlsFlags...), "add", "--id", "c1", "--url", "http://127.0.0.1:1/", "--interval", "100ms")...)
	require.Equal(t, exitOK, r.code, r.stderr)

	// Without the client certificate the server refuses the connection.
	r = runApp(t, "sessions", "--redis-url", srv.URL(), "--redis-tls-ca", certs.CA, "--timeout", "2s", "list")
	require.NotEqual(t, exitOK, r.code)

	client := srv.Client(t)
	runWorkerUntilLease(t, append(append([]string{"--id", "tw"}, tlsFlags...), fastTimings...), func() bool {
		v, err := client.Get(context.Background(), "poll:lease:{c1}").Result()
		return err == nil && len(v) > 3 && v[:3] == "tw#"
	})
}

// minimalACL is the documented least-privilege user of a worker and of the
// CLI (README, "Redis ACL"): its own key patterns and channel, and only the
// commands pollworker sends, including those its scripts call.
const minimalACL = "on >worker-pass resetkeys ~poll:* ~session:* resetchannels &poll:events " +
	"-@all +@connection -config +get +set +del +exists +getrange +incr +info +pexpire +pttl +type " +
	"+mget +getdel +hincrby +hget +hmget +hset +hdel +hkeys +hgetall +sadd +srem +smembers +sismember +scard +zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zcard " +
	"+xadd +xrange +xrevrange +lpush +ltrim +lrange +time +publish +subscribe +unsubscribe " +
	"+evalsha +eval +script|load +script|exists +watch +unwatch +multi +exec +dbsize +scan"

// TestMinimalACLUser runs init, sessions, status, check, explain and a
// worker as a Redis user that has exactly minimalACL and nothing more
// (init was refused DBSIZE and check SCARD under the ACL documented before).
func TestMinimalACLUser(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	require.NoError(t, admin.Do(context.Background(), append([]any{"ACL", "SETUSER", "pollworker"}, splitFields(minimalACL)...)...).Err())
	url := "redis://pollworker:worker-pass@" + srv.Addr() + "/0"

	r := runApp(t, "init", "--redis-url", url)
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runApp(t, "sessions", "--redis-url", url, "add", "--id", "c1", "--url", "http://127.0.0.1:1/", "--interval", "100ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runApp(t, "sessions", "--redis-url", url, "pause", "c1")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runApp(t, "sessions", "--redis-url", url, "resume", "c1")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runApp(t, "sessions", "--redis-url", url, "list")
	require.Equal(t, exitOK, r.code, r.stderr)

	runWorkerUntilLease(t, append([]string{"--redis-url", url, "--id", "aw"}, fastTimings...), func() bool {
		v, err := admin.Get(context.Background(), "poll:lease:{c1}").Result()
		// And the status page's timeline (LPUSH, LTRIM, PEXPIRE) written.
		return err == nil && len(v) > 3 && v[:3] == "aw#" && admin.Exists(context.Background(), "poll:timeline:aw").Val() == 1
	})
	// The drain released the lease as this user: release.lua's TIME and the
	// HSET of the handoff mark (in poll:fencing:{c1}, under ~poll:*)
	// passed, and nothing was denied on the way but the eviction-policy
	// check, which is skipped by design (-config).
	require.Zero(t, admin.Exists(context.Background(), "poll:lease:{c1}").Val(), "lease released at drain")
	require.NotEmpty(t, admin.HGet(context.Background(), "poll:fencing:{c1}", "handoff").Val(), "handoff mark left")
	// sessions rm deletes the handoff mark (HDEL) as this user.
	r = runApp(t, "sessions", "--redis-url", url, "rm", "c1")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Empty(t, admin.HGet(context.Background(), "poll:fencing:{c1}", "handoff").Val(), "handoff mark deleted")
	entries, err := admin.Do(context.Background(), "ACL", "LOG").Slice()
	require.NoError(t, err)
	for _, e := range entries {
		m, ok := e.(map[any]any)
		require.True(t, ok, "ACL LOG entry %v", e)
		require.Equal(t, "config|get", m["object"], "denied: %v", e)
	}
	r = runApp(t, "status", "--redis-url", url)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NotContains(t, r.stdout, "may not run SCAN")
	r = runApp(t, "check", "--redis-url", url, "--grace", "0s")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runApp(t, "explain", "--redis-url", url, "c1")
	require.NotEqual(t, exitUsage, r.code, r.stderr)

	// And nothing more: a key outside the patterns is refused.
	user := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "pollworker", Password: "worker-pass"})
	t.Cleanup(func() { _ = user.Close() })
	require.NoError(t, user.Set(context.Background(), "poll:probe", "x", 0).Err())
	require.ErrorContains(t, user.Set(context.Background(), "other:key", "x", 0).Err(), "NOPERM")
	require.ErrorContains(t, user.FlushAll(context.Background()).Err(), "NOPERM")
}

func splitFields(s string) []any {
	var out []any
	field := ""
	for _, r := range s + " " {
		if r == ' ' {
			if field != "" {
				out = append(out, field)
			}
			field = ""
			continue
		}
		field += string(r)
	}
	return out
}

// TestACLUserMissingAPermission: a user missing one permission of
// minimalACL is refused at start with exit 2 and Redis's NOPERM, by run
// and by a session write, before anything is written. Before: run waited
// forever ("Redis does not answer yet") without a command or a key, and
// without the channel it ran, heard no session change and polled a paused
// session until its next full round (10 s), logging nothing; sessions
// pause wrote and published nothing, silently.
func TestACLUserMissingAPermission(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	tests := []struct {
		name, user, acl string
	}{
		{"no events channel", "nochan", strings.Replace(minimalACL, "&poll:events ", "", 1)},
		{"no session keys", "nosess", strings.Replace(minimalACL, "~session:* ", "", 1)},
		{"no scripts", "noeval", strings.Replace(minimalACL, "+evalsha +eval ", "", 1)},
	}
	r := runApp(t, "sessions", "--redis-url", srv.URL(), "add", "--id", "c1", "--url", "http://127.0.0.1:1/", "--interval", "1s")
	require.Equal(t, exitOK, r.code, r.stderr)
	const want = "the Redis user lacks a permission pollworker needs (a command, a key or the channel)"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NotEqual(t, minimalACL, tt.acl)
			require.NoError(t, admin.Do(context.Background(), append([]any{"ACL", "SETUSER", tt.user}, splitFields(tt.acl)...)...).Err())
			url := "redis://" + tt.user + ":worker-pass@" + srv.Addr() + "/0"
			code, stderr, took := runUntilExit(t, "--redis-url", url, "--id", "acl-"+tt.user)
			require.Equal(t, exitUsage, code, stderr)
			require.Contains(t, lastLine(stderr), want)
			require.Contains(t, lastLine(stderr), "NOPERM")
			require.NotContains(t, stderr, `"msg":"worker starting"`)
			require.Less(t, took, 10*time.Second)

			r := runApp(t, "sessions", "--redis-url", url, "pause", "c1")
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, want)
		})
	}
	raw, err := admin.Get(context.Background(), "session:c1").Result()
	require.NoError(t, err)
	require.NotContains(t, raw, "paused", "a refused pause wrote nothing")
}
