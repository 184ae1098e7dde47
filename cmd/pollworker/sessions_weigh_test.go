package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// TestSessionsApplyKeepsLoadsAndSelectors: sessions apply writes the loads
// (polls per day) and selectors the workers plan with; on an index whose
// loads are incomplete (written before loads were kept) it counts them, as
// sessions reweigh does; export writes the selector back.
func TestSessionsApplyKeepsLoadsAndSelectors(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "s.yaml")
	write := func(body string) {
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	}
	cli := func(args ...string) result {
		t.Helper()
		return runApp(t, append([]string{"sessions", "--redis-url", srv.URL()}, args...)...)
	}
	loadOf := func(id, sel string) int {
		w, err := store.Weights(ctx)
		require.NoError(t, err)
		require.True(t, w.Complete)
		if sel == "" {
			return w.Loads[keyspace.BucketOf(id)]
		}
		return w.Spaces[sel].Loads[keyspace.BucketOf(id)]
	}

	write("sessions:\n  - {id: a, url: http://x/a, interval: 1s}\n  - {id: b, url: http://x/b, interval: 1h, selector: 'zone=eu,tier=1'}\n")
	r := cli("apply", "-f", path)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, 86400, loadOf("a", ""))
	require.Equal(t, 24, loadOf("b", "tier=1,zone=eu"))

	write("sessions:\n  - {id: a, url: http://x/a, interval: 1m}\n  - {id: b, url: http://x/b, interval: 1h, selector: zone=us}\n")
	r = cli("apply", "-f", path, "--dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "~ b selector: tier=1,zone=eu → zone=us")
	r = cli("apply", "-f", path)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, 1440, loadOf("a", ""))
	require.Equal(t, 24, loadOf("b", "zone=us"))
	require.Zero(t, loadOf("b", "tier=1,zone=eu"))
	r = cli("export")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "selector: zone=us")

	// An index written before loads were kept: apply counts them.
	require.NoError(t, client.Del(ctx, keyspace.Space{}.SessionLoads()).Err())
	write("sessions:\n  - {id: a, url: http://x/a, interval: 2s}\n  - {id: b, url: http://x/b, interval: 1h, selector: zone=us}\n")
	r = cli("apply", "-f", path)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "counted the poll loads of the index")
	require.Equal(t, 43200, loadOf("a", ""))
	require.Equal(t, 24, loadOf("b", "zone=us"))
	r = cli("reweigh")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "poll loads counted: 43224 polls/day")
}

// TestCheckNotesIncompleteLoads: check notes an index whose loads are
// incomplete (the workers then balance by counts), and stops once they
// are counted.
func TestCheckNotesIncompleteLoads(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	r := runApp(t, "sessions", "--redis-url", srv.URL(), "add", "--id", "a", "--url", "http://x/a", "--interval", "1s")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runApp(t, "check", "--redis-url", srv.URL(), "--grace", "0")
	require.NotContains(t, r.stdout, "poll loads: incomplete")
	require.NoError(t, client.HDel(context.Background(), keyspace.Space{}.SessionLoads(), "complete").Err())
	r = runApp(t, "check", "--redis-url", srv.URL(), "--grace", "0")
	require.Contains(t, r.stdout, "poll loads: incomplete")
}
