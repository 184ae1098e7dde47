package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

// TestInitCommand: `pollworker init` declares a new keyspace fresh (its
// loss marker written without a quarantine), is a no-op once it exists,
// and refuses with exit 2, naming what it found, a keyspace whose marker
// is missing but which holds a fencing counter (Redis lost data there),
// and a server larger than --scan-limit.
func TestInitCommand(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := ctxT(t)
	marker := keyspace.Space{}.Epoch(0)

	r := runApp(t, "init", "--redis-url", srv.URL())
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `keyspace "poll" is new`)
	v, err := client.Get(ctx, marker).Result()
	require.NoError(t, err)
	require.Regexp(t, `^\w+:0:2$`, v, "this server's run id, no quarantine, no key of the layout before the fencing records")

	r = runApp(t, "init", "--redis-url", srv.URL())
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "initialised already")

	require.NoError(t, client.Del(ctx, marker).Err())
	require.NoError(t, client.Set(ctx, keyspace.Space{}.Fence("s1"), "7", 0).Err())
	r = runApp(t, "init", "--redis-url", srv.URL())
	require.Equal(t, exitUsage, r.code)
	oneLine(t, r.stderr)
	require.Contains(t, r.stderr, `init: refused, keyspace "poll" was used: lease: keyspace in use: 1 fencing record (e.g. poll:fence:{s1})`)
	require.Zero(t, client.Exists(ctx, marker).Val(), "nothing written")

	// Another keyspace on the same server needs its own session prefix:
	// "session" holds poll's sessions (session.ClaimNamespace).
	r = runApp(t, "init", "--redis-url", srv.URL(), "--key-prefix", "other")
	require.Equal(t, exitUsage, r.code)
	oneLine(t, r.stderr)
	require.Contains(t, r.stderr, `--session-prefix "session" holds the sessions of --key-prefix "poll" (key session:{owner}), not of "other"`)

	require.NoError(t, client.Set(ctx, "unrelated", "1", 0).Err())
	r = runApp(t, "init", "--redis-url", srv.URL(), "--key-prefix", "other", "--session-prefix", "other-session", "--scan-limit", "1")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "more than the scan limit 1; --scan-limit 0 scans it all the same")
	r = runApp(t, "init", "--redis-url", srv.URL(), "--key-prefix", "other", "--session-prefix", "other-session", "--scan-limit", "0")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `keyspace "other" is new`)
}

// TestAnotherKeyPrefixCannotWriteTheSessionPrefix: once "session" holds
// poll's sessions, a worker or a write of another key prefix with that
// session prefix is refused, having written nothing; reading still works
// (so that a fleet that shared it can export its sessions).
func TestAnotherKeyPrefixCannotWriteTheSessionPrefix(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := ctxT(t)
	r := runApp(t, "sessions", "add", "--redis-url", srv.URL(), "--id", "api-1", "--url", "http://127.0.0.1:1/a", "--interval", "1s")
	require.Equal(t, exitOK, r.code, r.stderr)
	want := `--session-prefix "session" holds the sessions of --key-prefix "poll" (key session:{owner}), not of "b"`

	r = runApp(t, "sessions", "add", "--redis-url", srv.URL(), "--key-prefix", "b", "--id", "api-1", "--url", "http://127.0.0.1:1/evil", "--interval", "1s", "--replace")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, want)
	r = runApp(t, "run", "--redis-url", srv.URL(), "--key-prefix", "b", "--id", "x", "--http-addr", "")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, want)
	r = runApp(t, "sessions", "rm", "--redis-url", srv.URL(), "--key-prefix", "b", "api-1")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "nothing changed; failed on api-1")
	require.Contains(t, r.stderr, want)
	r = runApp(t, "sessions", "list", "--redis-url", srv.URL(), "--key-prefix", "b")
	require.Equal(t, exitOK, r.code, r.stderr)

	v, err := client.Get(ctx, keyspace.Space{}.Session("api-1")).Result()
	require.NoError(t, err)
	require.Contains(t, v, "http://127.0.0.1:1/a", "poll's definition untouched")
	n, err := client.Keys(ctx, "b:*").Result()
	require.NoError(t, err)
	require.Empty(t, n, "nothing written under b")
}
