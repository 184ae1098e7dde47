package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// TestSessionsNonHTTPKeyspace: an embedder's keyspace whose url-rule is
// "any" is managed by the CLI like any other: add, export | apply --dry-run
// and apply take serial:/dev/ttyUSB0; under the default rule they are
// refused, exit 2, naming the rule and the setting (issue 22: export |
// apply -f - --dry-run of such sessions failed with "url must be an
// absolute http or https URL").
func TestSessionsNonHTTPKeyspace(t *testing.T) {
	srv := redistest.Start(t)
	cli := func(args ...string) result {
		t.Helper()
		return runApp(t, append([]string{"sessions", "--redis-url", srv.URL()}, args...)...)
	}
	// What an embedder's program wrote through its own store.
	store, err := session.NewStore(srv.Client(t), keyspace.Space{}, session.WithURLCheck(nil))
	require.NoError(t, err)
	for _, id := range []string{"tty-0", "tty-1"} {
		require.NoError(t, store.Put(ctxT(t), session.Session{ID: id, URL: "serial:/dev/" + id, Interval: session.Duration(time.Second)}))
	}
	exported := func() string {
		t.Helper()
		r := cli("export")
		require.Equal(t, exitOK, r.code, r.stderr)
		p := filepath.Join(t.TempDir(), "sessions.yaml")
		require.NoError(t, os.WriteFile(p, []byte(r.stdout), 0o600))
		return p
	}

	r := cli("config")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "url-rule: http\n", r.stdout)
	r = cli("apply", "-f", exported(), "--dry-run")
	require.Equal(t, exitUsage, r.code, r.stdout)
	require.Contains(t, r.stderr, `entry 1 (line 5, id tty-0): url must be an absolute http or https URL with a host; its scheme is "serial"`)
	require.Contains(t, r.stderr, "pollworker: sessions apply: the keyspace's url-rule is http (see sessions config --url-rule)\n")
	r = cli("add", "--id", "tty-2", "--url", "serial:/dev/ttyUSB2", "--interval", "1s")
	require.Equal(t, exitUsage, r.code, r.stdout)
	require.Equal(t, `pollworker: invalid session: url must be an absolute http or https URL with a host; its scheme is "serial" `+
		"(the keyspace's url-rule is http; see sessions config --url-rule)\n", r.stderr)

	r = cli("config", "--url-rule", "any")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "url-rule: any (was http)\n", r.stdout)
	r = cli("config")
	require.Equal(t, "url-rule: any\n", r.stdout)

	r = cli("apply", "-f", exported(), "--dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "dry run, nothing written: would create 0, update 0, prune 0; 2 unchanged\n", r.stdout)
	r = cli("add", "--id", "tty-2", "--url", "serial:/dev/ttyUSB2", "--interval", "1s")
	require.Equal(t, exitOK, r.code, r.stderr)
	p := filepath.Join(t.TempDir(), "more.yaml")
	require.NoError(t, os.WriteFile(p, []byte("sessions:\n  - {id: tty-3, url: 'serial:/dev/ttyUSB3', interval: 1s}\n"), 0o600))
	r = cli("apply", "-f", p)
	require.Equal(t, exitOK, r.code, r.stderr)
	got, err := store.Get(ctxT(t), "tty-3")
	require.NoError(t, err)
	require.Equal(t, "serial:/dev/ttyUSB3", got.URL)
	r = cli("add", "--id", "blank", "--url", " ", "--interval", "1s")
	require.Equal(t, exitUsage, r.code, "any is not blank")

	r = cli("config", "--url-rule", "none")
	require.Equal(t, exitUsage, r.code)
	require.Equal(t, "pollworker: sessions config: --url-rule \"none\" must be http or any\n", r.stderr)
}
