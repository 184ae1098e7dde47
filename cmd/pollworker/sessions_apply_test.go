package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

func TestPlanApply(t *testing.T) {
	yes, no := true, false
	s := func(id, url string, interval time.Duration, paused bool, labels map[string]string) session.Session {
		return session.Session{ID: id, URL: url, Interval: session.Duration(interval), Paused: paused, Labels: labels}
	}
	current := []session.Session{
		s("a", "http://x/a", time.Second, false, nil),
		s("b", "http://x/b", time.Second, true, map[string]string{"k": "v"}),
		s("c", "http://u:old@x/c", time.Second, false, nil),
		s("gone", "http://x/gone", time.Second, false, nil),
		s("p", "http://x/p", time.Second, true, nil),
	}
	malformed := []session.Problem{
		{ID: "broken", Err: &session.FieldError{Field: "interval", Reason: "1ms is below the minimum 10ms"}},
		{ID: "stray", Err: session.ErrMalformed},
	}
	entries := []session.Entry{
		{Session: s("new", "http://x/new", time.Second, false, nil)},
		{Session: s("a", "http://x/a", time.Second, false, map[string]string{})}, // unchanged: no paused, empty labels
		{Session: s("p", "http://x/p", time.Second, false, nil)},                 // unchanged: paused by a command, no paused
		{Session: s("b", "http://x/b2", 2*time.Second, false, nil), Paused: &no},
		{Session: s("c", "http://u:new@x/c", time.Second, true, nil), Paused: &yes},
		{Session: s("broken", "http://x/broken", time.Second, false, nil)},
	}
	tests := []struct {
		name  string
		prune bool
		want  applyPlan
	}{
		{name: "keep", want: applyPlan{
			write: []session.Session{s("b", "http://x/b2", 2*time.Second, false, nil), s("broken", "http://x/broken", time.Second, false, nil),
				s("c", "http://u:new@x/c", time.Second, true, nil), s("new", "http://x/new", time.Second, false, nil)},
			lines: []string{
				"~ b url: http://x/b → http://x/b2", "~ b interval: 1s → 2s", "~ b labels: k=v → -", "~ b paused: true → false",
				"~ broken: malformed value replaced (it had interval 1ms is below the minimum 10ms)",
				"~ c url: password changed", "~ c paused: false → true",
				"+ new",
			},
			created: 1, updated: 3, unchanged: 2, repaired: 1, keptPaused: 1, notInFile: 1, malformedKept: 1,
		}},
		{name: "prune", prune: true, want: applyPlan{
			write: []session.Session{s("b", "http://x/b2", 2*time.Second, false, nil), s("broken", "http://x/broken", time.Second, false, nil),
				s("c", "http://u:new@x/c", time.Second, true, nil), s("new", "http://x/new", time.Second, false, nil)},
			prune: []string{"gone"},
			lines: []string{
				"~ b url: http://x/b → http://x/b2", "~ b interval: 1s → 2s", "~ b labels: k=v → -", "~ b paused: true → false",
				"~ broken: malformed value replaced (it had interval 1ms is below the minimum 10ms)",
				"~ c url: password changed", "~ c paused: false → true",
				"- gone",
				"+ new",
			},
			created: 1, updated: 3, unchanged: 2, repaired: 1, keptPaused: 1, malformedKept: 1,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planApply(entries, current, malformed, tt.prune)
			require.Equal(t, tt.want, got)
			require.NotContains(t, strings.Join(got.lines, "\n"), "old")
		})
	}

	p := planApply(entries, current, malformed, false)
	require.Equal(t, `created 1, updated 3 (1 malformed values replaced), unchanged 2, pruned 0; `+
		`1 session kept paused (its entry does not say "paused"; "paused: false" resumes it); 1 session not in the file kept (--prune removes them); `+
		`1 malformed entry not in the file kept (never pruned; see sessions list)`, p.summary(false))
	require.Equal(t, "dry run, nothing written: would create 0, update 0, prune 0; 0 unchanged", applyPlan{}.summary(true))
}

// redisState is every key of a Redis and its DUMP: equal states mean
// nothing was written, the session revision included.
func redisState(t *testing.T, c *redis.Client) map[string]string {
	t.Helper()
	ctx := ctxT(t)
	keys, err := c.Keys(ctx, "*").Result()
	require.NoError(t, err)
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		v, err := c.Dump(ctx, k).Result()
		require.NoError(t, err)
		out[k] = v
	}
	return out
}

// TestSessionsApplyExport runs apply and export against a real
// redis-server: round trip, idempotence, dry run, prune, the paused rule,
// malformed entries, and refused files that write nothing.
func TestSessionsApplyExport(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	dir := t.TempDir()
	file := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	cli := func(args ...string) result {
		t.Helper()
		return runApp(t, append([]string{"sessions", "--redis-url", srv.URL()}, args...)...)
	}
	// pipe runs export | apply -f - with the built binary.
	var exportArgs []string // of the export in pipe
	pipe := func(applyArgs ...string) (string, string) {
		t.Helper()
		bin := binary(t)
		export := exec.CommandContext(ctxT(t), bin, append([]string{"sessions", "--redis-url", srv.URL(), "export"}, exportArgs...)...)
		apply := exec.CommandContext(ctxT(t), bin, append([]string{"sessions", "--redis-url", srv.URL(), "apply", "-f", "-"}, applyArgs...)...)
		var exportErr, out, errOut bytes.Buffer
		r, err := export.StdoutPipe()
		require.NoError(t, err)
		export.Stderr = &exportErr
		apply.Stdin, apply.Stdout, apply.Stderr = r, &out, &errOut
		require.NoError(t, export.Start())
		require.NoError(t, apply.Run(), errOut.String())
		require.NoError(t, export.Wait(), exportErr.String())
		return out.String(), exportErr.String()
	}

	v1 := file("v1.yaml", `sessions:
  - id: web-2
    url: https://example.com/two
    interval: 30s
    labels: {team: core}
  - id: web-1
    url: https://example.com/one
    interval: 1m
  - id: web-3
    url: https://example.com/three
    interval: 5s
    paused: true
`)
	r := cli("apply", "-f", v1)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "created 3, updated 0, unchanged 0, pruned 0\n", r.stdout)
	r = cli("list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, `ID     URL                        INTERVAL  PAUSED  LABELS     SELECTOR
web-1  https://example.com/one    1m0s      no      -          -
web-2  https://example.com/two    30s       no      team=core  -
web-3  https://example.com/three  5s        yes     -          -
3 sessions: 2 active, 1 paused; 0 malformed
`, r.stdout)
	applied := redisState(t, client)

	t.Run("second apply writes nothing", func(t *testing.T) {
		r := cli("apply", "-f", v1)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Equal(t, "created 0, updated 0, unchanged 3, pruned 0\n", r.stdout)
		require.Equal(t, applied, redisState(t, client), "no write, no revision bump")
	})

	t.Run("export sorted, password kept", func(t *testing.T) {
		r := cli("export")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, `sessions:
  - id: web-1
    url: https://example.com/one
    interval: 1m0s
  - id: web-2
    url: https://example.com/two
    interval: 30s
    labels:
      team: core
  - id: web-3
    url: https://example.com/three
    interval: 5s
    paused: true
`)
		r = cli("export", "--format", "json")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, `"id": "web-1"`)
		r = cli("export", "--format", "toml")
		require.Equal(t, exitUsage, r.code)
		require.Equal(t, "pollworker: sessions export: --format \"toml\" must be yaml or json\n", r.stderr)
	})

	t.Run("export | apply -f - round-trips", func(t *testing.T) {
		out, _ := pipe("--prune")
		require.Equal(t, "created 0, updated 0, unchanged 3, pruned 0\n", out)
		require.Equal(t, applied, redisState(t, client))
	})

	v2 := file("v2.json", `{"sessions": [
	{"id": "web-1", "url": "https://example.com/one", "interval": "2m"},
	{"id": "web-4", "url": "https://example.com/four", "interval": "1s", "labels": {"team": "edge"}}
]}`)
	t.Run("dry run prints the diff and writes nothing", func(t *testing.T) {
		r := cli("apply", "-f", v2, "--prune", "--dry-run")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Equal(t, `~ web-1 interval: 1m0s → 2m0s
- web-2
- web-3
+ web-4
dry run, nothing written: would create 1, update 1, prune 2; 0 unchanged
`, r.stdout)
		require.Equal(t, applied, redisState(t, client))
	})

	t.Run("invalid file: every problem, exit 2, nothing written", func(t *testing.T) {
		bad := file("bad.yaml", `sessions:
  - id: web-1
    url: ftp://bob:hunter2@example.com/
    interval: 1m
  - id: web-2
    url: https://example.com/two
    interval: 30
  - id: web-1
    url: https://example.com/again
    interval: 1m
    colour: blue
`)
		r := cli("apply", "-f", bad, "--prune")
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Empty(t, r.stdout)
		require.Equal(t, `pollworker: sessions apply: `+bad+`: entry 1 (line 2, id web-1): url must be an absolute http or https URL with a host; its scheme is "ftp"
pollworker: sessions apply: `+bad+`: entry 2 (line 7, id web-2): interval "30" is not a duration like "30s" or "1m30s"
pollworker: sessions apply: `+bad+`: entry 3 (line 11, id web-1): unknown field "colour" (fields: id, url, interval, paused, labels, selector, method, headers, body, expect, profile, timeout, schedule, tz, jitter, catchup, catchup_window)
pollworker: sessions apply: `+bad+`: entry 3 (line 8, id web-1): id repeats entry 1 (line 2); each id may appear once
pollworker: sessions apply: the keyspace's url-rule is http (see sessions config --url-rule)
pollworker: sessions apply: `+bad+`: 4 problems; nothing written
`, r.stderr)
		require.NotContains(t, r.stderr, "hunter2")
		require.Equal(t, applied, redisState(t, client))

		r = cli("apply", "-f", filepath.Join(dir, "nosuch.yaml"))
		require.Equal(t, exitUsage, r.code)
		oneLine(t, r.stderr)
		require.Contains(t, r.stderr, "no such file or directory; nothing written")
	})

	t.Run("empty file with --prune refused", func(t *testing.T) {
		for _, body := range []string{"", "sessions: []\n", "# the sessions go here\nsessions:\n"} {
			r := cli("apply", "-f", file("empty.yaml", body), "--prune")
			require.Equal(t, exitUsage, r.code, r.stderr)
			oneLine(t, r.stderr)
			require.Contains(t, r.stderr, "has no sessions, and --prune would remove every session: add --allow-empty if that is meant; nothing written")
			require.Equal(t, applied, redisState(t, client))
		}
		r := cli("apply", "-f", file("empty.yaml", ""))
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Equal(t, "created 0, updated 0, unchanged 0, pruned 0; 3 sessions not in the file kept (--prune removes them)\n", r.stdout)
		require.Equal(t, applied, redisState(t, client))
	})

	t.Run("paused: absent keeps, present sets", func(t *testing.T) {
		r := cli("pause", "web-1")
		require.Equal(t, exitOK, r.code, r.stderr)
		r = cli("apply", "-f", v1)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "unchanged 3")
		r = cli("resume", "web-3")
		require.Equal(t, exitOK, r.code, r.stderr)
		r = cli("apply", "-f", v1, "--dry-run")
		require.Equal(t, "~ web-3 paused: false → true\n", strings.SplitAfter(r.stdout, "\n")[0])
		r = cli("apply", "-f", v1)
		require.Contains(t, r.stdout, "updated 1,")
		r = cli("list")
		require.Contains(t, r.stdout, "3 sessions: 1 active, 2 paused")
	})

	// A malformed entry: never pruned, skipped by export, replaced by an
	// entry of the file with its id.
	require.NoError(t, client.Set(ctxT(t), "session:odd", `{"url":"https://example.com/","interval":"1ms"}`, 0).Err())
	require.NoError(t, client.SAdd(ctxT(t), keyspace.Space{}.SessionBucketOf("odd"), "odd").Err())
	t.Run("prune", func(t *testing.T) {
		r := cli("apply", "-f", v2, "--prune")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Equal(t, "created 1, updated 1, unchanged 0, pruned 2; 1 session kept paused (its entry does not say \"paused\"; \"paused: false\" resumes it); "+
			"1 malformed entry not in the file kept (never pruned; see sessions list)\n", r.stdout)
		r = cli("list")
		require.Contains(t, r.stdout, "web-1  https://example.com/one   2m0s      yes")
		require.Contains(t, r.stdout, "2 sessions: 1 active, 1 paused; 1 malformed")

		// An export that skipped a malformed entry prints the rest and
		// exits 1 (a backup script notices), unless --allow-malformed.
		r = cli("export")
		require.Equal(t, exitFailure, r.code, r.stderr)
		require.Contains(t, r.stdout, "id: web-1")
		require.Contains(t, r.stderr, "sessions export: incomplete: skipped 1 malformed entry (see sessions list): odd; the rest was printed")
		exportArgs = []string{"--allow-malformed"}
		out, exportErr := pipe()
		require.Equal(t, "created 0, updated 0, unchanged 2, pruned 0; "+
			"1 malformed entry not in the file kept (never pruned; see sessions list)\n", out)
		require.Equal(t, "pollworker: sessions export: skipped 1 malformed entry (see sessions list): odd\n", exportErr)

		r = cli("apply", "-f", file("odd.yaml", "sessions:\n  - {id: odd, url: 'https://example.com/odd', interval: 1s}\n"))
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Equal(t, "created 0, updated 1 (1 malformed values replaced), unchanged 0, pruned 0; 2 sessions not in the file kept (--prune removes them)\n", r.stdout)

		r = cli("apply", "-f", file("empty.yaml", ""), "--prune", "--allow-empty")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Equal(t, "created 0, updated 0, unchanged 0, pruned 3\n", r.stdout)
		r = cli("list")
		require.Equal(t, "0 sessions: 0 active, 0 paused; 0 malformed\n", r.stdout)
	})
}

func TestSessionsApplyHelp(t *testing.T) {
	r := runApp(t, "sessions", "apply", "--help")
	require.Equal(t, exitOK, r.code, r.stderr)
	for _, want := range []string{"The whole file is checked before anything is written", "--allow-empty", "keeps the state the session has in Redis"} {
		require.Contains(t, r.stdout, want)
	}
	r = runApp(t, "sessions", "apply")
	require.Equal(t, exitUsage, r.code)
	oneLine(t, r.stderr)
}

// TestSelectorNoWorkerMatchesWarns: add and apply warn, naming the
// selector, when no live worker's labels match it; the sessions are still
// written, exit 0 (issue 22: such a selector was accepted without a word).
func TestSelectorNoWorkerMatchesWarns(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	labels, err := nodes.ParseLabels("zone=us,tier=gold")
	require.NoError(t, err)
	reg, err := nodes.New(nodes.Config{Client: client, ID: "w1", TTL: time.Minute, Labels: labels})
	require.NoError(t, err)
	require.NoError(t, reg.Heartbeat(ctxT(t)))
	cli := func(args ...string) result {
		t.Helper()
		return runApp(t, append([]string{"sessions", "--redis-url", srv.URL()}, args...)...)
	}

	r := cli("add", "--id", "us-1", "--url", "http://127.0.0.1:1/", "--interval", "1s", "--selector", "zone=us")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Empty(t, r.stderr)
	r = cli("add", "--id", "eu-1", "--url", "http://127.0.0.1:1/", "--interval", "1s", "--selector", "zone=eu")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "added session eu-1\n", r.stdout)
	require.Equal(t, "pollworker: sessions add: warning: no live worker's --labels match selector zone=eu (1 session; 1 placeable live worker): "+
		"polled by nobody until a worker with these labels joins\n", r.stderr)

	file := filepath.Join(t.TempDir(), "s.yaml")
	require.NoError(t, os.WriteFile(file, []byte("sessions:\n"+
		"  - {id: eu-1, url: 'http://127.0.0.1:1/', interval: 1s, selector: zone=eu}\n"+
		"  - {id: eu-2, url: 'http://127.0.0.1:1/', interval: 1s, selector: 'zone=eu'}\n"+
		"  - {id: us-1, url: 'http://127.0.0.1:1/', interval: 1s, selector: 'tier=gold,zone=us'}\n"), 0o600))
	for _, dry := range []bool{true, false} {
		args := []string{"apply", "-f", file}
		if dry {
			args = append(args, "--dry-run")
		}
		r = cli(args...)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Equal(t, "pollworker: sessions apply: warning: no live worker's --labels match selector zone=eu (2 sessions; 1 placeable live worker): "+
			"polled by nobody until a worker with these labels joins\n", r.stderr)
	}
}

// TestRunIDsTellARestart: runIDs, which sessions apply compares before
// and after its writes, changes when Redis restarts and not otherwise.
// (Redis killed and restarted without persistence during an apply of 100k
// sessions lost 4% of them, and the apply said it created them all.)
func TestRunIDsTellARestart(t *testing.T) {
	srv := redistest.Start(t)
	c := redistest.NewClient(t, srv.Addr())
	first := runIDs(ctxT(t), c)
	require.Len(t, first, 40)
	require.Equal(t, first, runIDs(ctxT(t), c))
	srv.Restart()
	require.Eventually(t, func() bool { return c.Ping(ctxT(t)).Err() == nil }, 10*time.Second, 10*time.Millisecond)
	again := runIDs(ctxT(t), c)
	require.Len(t, again, 40)
	require.NotEqual(t, first, again)
}

// TestSessionsExportSaysTheURLRule: the URL rule lives in Redis and goes
// with its data; a backup of non-http targets, applied to a keyspace that
// lost it, was refused with no word of the rule in the file.
func TestSessionsExportSaysTheURLRule(t *testing.T) {
	srv := redistest.Start(t)
	cli := func(args ...string) result {
		return runApp(t, append([]string{"sessions", "--redis-url", srv.URL()}, args...)...)
	}
	r := cli("export")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NotContains(t, r.stdout, "url-rule", "the default rule: nothing to say")
	require.Equal(t, exitOK, cli("config", "--url-rule", "any").code)
	require.Equal(t, exitOK, cli("add", "--id", "ser", "--url", "serial:/dev/ttyUSB0", "--interval", "1s").code)
	r = cli("export")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, `# url-rule: any (a keyspace that lost its data needs "pollworker sessions config --url-rule any"`), r.stdout)
	r = cli("export", "--format", "json")
	require.NotContains(t, r.stdout, "url-rule", "JSON has no comments")
}

func TestPlural(t *testing.T) {
	for _, tt := range []struct {
		n          int
		noun, want string
	}{{1, "key", "1 key"}, {2, "key", "2 keys"}, {0, "entry", "0 entries"}, {3, "session", "3 sessions"}, {1, "entry", "1 entry"}} {
		require.Equal(t, tt.want, plural(tt.n, tt.noun))
	}
}
