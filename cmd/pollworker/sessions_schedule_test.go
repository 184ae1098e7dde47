package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// TestSessionsScheduled: a scheduled session through add, get, list,
// export and apply (issue 25 item 2).
func TestSessionsScheduled(t *testing.T) {
	mr, url := miniURL(t)
	cli := func(args ...string) result {
		t.Helper()
		return runApp(t, append([]string{"sessions", "--redis-url", url}, args...)...)
	}
	r := cli("add", "--id", "report", "--url", "https://example.com/r", "--schedule", "0 9 * * 1-5", "--tz", "Europe/Berlin",
		"--jitter", "1m", "--catchup", "all", "--catchup-window", "6h")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = cli("add", "--id", "tick", "--url", "https://example.com/t", "--schedule", "*/2 * * * * *")
	require.Equal(t, exitOK, r.code, r.stderr)

	got, err := newTestStore(t, mr).Get(ctxT(t), "report")
	require.NoError(t, err)
	require.Equal(t, session.Session{ID: "report", URL: "https://example.com/r", Schedule: "0 9 * * 1-5", TZ: "Europe/Berlin",
		Jitter: session.Duration(time.Minute), CatchUp: "all", CatchUpWindow: session.Duration(6 * time.Hour)}, got)

	r = cli("list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, `ID      URL                    INTERVAL                          PAUSED  LABELS  SELECTOR
report  https://example.com/r  cron 0 9 * * 1-5 (Europe/Berlin)  no      -       -
tick    https://example.com/t  cron */2 * * * * *                no      -       -
2 sessions: 2 active, 0 paused; 0 malformed
`, r.stdout)

	r = cli("get", "tick", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var v struct {
		Session map[string]any `json:"session"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
	require.Equal(t, map[string]any{"id": "tick", "url": "https://example.com/t", "paused": false, "method": "GET", "expect": "200-399",
		"schedule": "*/2 * * * * *", "tz": "UTC", "catchup": "latest", "catchup_window": "1h0m0s"}, v.Session)
	r = cli("get", "report")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^schedule:\s+0 9 \* \* 1-5 \(tz Europe/Berlin, catchup all within 6h0m0s\)$`, r.stdout)
	require.Regexp(t, `(?m)^jitter:\s+1m0s$`, r.stdout)
	require.Regexp(t, `(?m)^next slot:\s+\S+T0[78]:00:00Z, starts \S+ \(jitter\)$`, r.stdout)

	// The slots a holder recorded show in get and list --wide.
	r = cli("get", "tick")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^next slot:\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d[02468]Z$`, r.stdout)
	require.Regexp(t, `(?m)^last slot:\s+none$`, r.stdout)
	mr.HSet(keyspace.Space{}.State("tick"), "slot_started", "1777626002000", "slot_finished", "1777626000000", "slot_outcome", "ok", "slot_token", "3")
	r = cli("get", "tick")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^last slot:\s+2026-05-01T09:00:02Z started, not finished \(`, r.stdout)
	mr.HSet(keyspace.Space{}.State("tick"), "slot_finished", "1777626002000")
	r = cli("list", "--wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^tick .* next \S+Z, last 2026-05-01T09:00:02Z ok \(`, r.stdout)
	require.Regexp(t, `(?m)^report .* next \S+T0[78]:0[01]:\d\dZ, last none$`, r.stdout)

	// A paused session runs no slot: it shows none next.
	r = cli("pause", "tick")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = cli("get", "tick")
	require.Regexp(t, `(?m)^next slot:\s+none: paused$`, r.stdout)
	r = cli("list", "--wide")
	require.Regexp(t, `(?m)^tick .* none next \(paused\), last 2026-05-01T09:00:02Z ok \(`, r.stdout)
	r = cli("resume", "tick")
	require.Equal(t, exitOK, r.code, r.stderr)

	// explain says the schedule and the slots, not an interval.
	r = runApp(t, "explain", "--redis-url", url, "tick")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^definition:\s+schedule \*/2 \* \* \* \* \* \(tz UTC, catchup latest within 1h0m0s\), active$`, r.stdout)
	require.Regexp(t, `(?m)^last slot:\s+2026-05-01T09:00:02Z ok \(`, r.stdout)
	require.Regexp(t, `(?m)^next slot:\s+\S+Z$`, r.stdout)
	require.NotContains(t, r.stdout, "next poll:")
	r = runApp(t, "explain", "--redis-url", url, "--json", "tick")
	require.Equal(t, exitOK, r.code, r.stderr)
	var ex struct {
		Session   string `json:"session"`
		Scheduled struct {
			Schedule string    `json:"schedule"`
			Slots    slotsView `json:"slots"`
		} `json:"scheduled"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ex))
	require.Equal(t, "tick", ex.Session)
	require.Equal(t, "*/2 * * * * *", ex.Scheduled.Schedule)
	require.Equal(t, "ok", ex.Scheduled.Slots.Outcome)

	// export | apply round-trips; a changed schedule shows in the diff.
	r = cli("export")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "    schedule: 0 9 * * 1-5\n    tz: Europe/Berlin\n    jitter: 1m0s\n    catchup: all\n    catchup_window: 6h0m0s\n")
	require.NotContains(t, r.stdout, "interval")
	p := filepath.Join(t.TempDir(), "s.yaml")
	require.NoError(t, os.WriteFile(p, []byte(r.stdout), 0o600))
	r = cli("apply", "-f", p)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "created 0, updated 0, unchanged 2, pruned 0\n", r.stdout)

	require.NoError(t, os.WriteFile(p, []byte(`sessions:
  - {id: report, url: "https://example.com/r", interval: 1h}
  - {id: tick, url: "https://example.com/t", schedule: "*/4 * * * * *", catchup: skip}
`), 0o600))
	r = cli("apply", "-f", p, "--dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "~ report interval: - → 1h0m0s\n~ report schedule: 0 9 * * 1-5 → -\n~ report tz: Europe/Berlin → -\n")
	require.Contains(t, r.stdout, "~ tick schedule: */2 * * * * * → */4 * * * * *\n~ tick catchup: - → skip\n")

	// A file with both, or neither, is refused whole: exit 2, nothing written.
	require.NoError(t, os.WriteFile(p, []byte(`sessions:
  - {id: tick, url: "https://example.com/t", interval: 1s, schedule: "@hourly"}
`), 0o600))
	r = cli("apply", "-f", p)
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "schedule and interval are both set: a session has exactly one of interval and schedule")
	got, err = newTestStore(t, mr).Get(ctxT(t), "tick")
	require.NoError(t, err)
	require.Equal(t, "*/2 * * * * *", got.Schedule)
}
