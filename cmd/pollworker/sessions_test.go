package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
)

// miniURL starts a miniredis for the test and returns its redis:// URL.
func miniURL(t *testing.T) (*miniredis.Miniredis, string) {
	t.Helper()
	m := miniredis.RunT(t)
	return m, "redis://" + m.Addr() + "/0"
}

func TestSessionsRoundTrip(t *testing.T) {
	mr, url := miniURL(t)
	cli := func(args ...string) result {
		t.Helper()
		return runApp(t, append([]string{"sessions", "--redis-url", url}, args...)...)
	}

	r := cli("list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "0 sessions: 0 active, 0 paused; 0 malformed\n", r.stdout)

	r = cli("add", "--id", "s1", "--url", "https://example.com/a", "--interval", "5s", "--label", "env=prod", "--label", "team=a,b")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "added session s1\n", r.stdout)
	// A URL holding credentials is refused (they belong in a profile) ...
	r = cli("add", "--id", "s2", "--url", "http://bob:hunter2@example.com/b", "--interval", "250ms", "--paused")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "url holds credentials")
	require.NotContains(t, r.stderr, "hunter2")
	// ... but one stored before that rule, or under the url-rule any, is
	// listed with its password hidden.
	store := newTestStore(t, mr)
	anyURL, err := session.NewStore(newTestClient(t, mr), keyspace.Space{}, session.WithURLCheck(nil))
	require.NoError(t, err)
	require.NoError(t, anyURL.Put(ctxT(t), session.Session{ID: "s2", URL: "http://bob:hunter2@example.com/b", Interval: session.Duration(250 * time.Millisecond), Paused: true}))

	// What the CLI wrote is what the store reads.
	got, err := store.Get(ctxT(t), "s1")
	require.NoError(t, err)
	require.Equal(t, session.Session{ID: "s1", URL: "https://example.com/a", Interval: session.Duration(5 * time.Second),
		Labels: map[string]string{"env": "prod", "team": "a,b"}}, got)

	// Adding an existing id needs --replace.
	r = cli("add", "--id", "s1", "--url", "https://example.com/other", "--interval", "1s")
	require.Equal(t, exitFailure, r.code)
	require.Equal(t, "pollworker: session s1 exists (use --replace to overwrite it)\n", r.stderr)
	r = cli("add", "--id", "s1", "--url", "https://example.com/a", "--interval", "2s", "--replace")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "replaced session s1\n", r.stdout)

	// A malformed entry is listed with its reason.
	mr.Set("session:bad", `{"url":"","interval":"1s"}`)
	_, err = mr.SAdd(keyspace.Space{}.SessionBucketOf("bad"), "bad")
	require.NoError(t, err)

	r = cli("list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, `ID  URL                             INTERVAL  PAUSED  LABELS  SELECTOR
s1  https://example.com/a           2s        no      -       -
s2  http://bob:xxxxx@example.com/b  250ms     yes     -       -
2 sessions: 1 active, 1 paused; 1 malformed
  malformed bad: session: malformed: url missing or blank
`, r.stdout)

	r = cli("pause", "s1")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "paused s1\n", r.stdout)
	r = cli("resume", "s2")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "resumed s2\n", r.stdout)

	r = cli("list", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var listed struct {
		Sessions  []listedSession  `json:"sessions"`
		Malformed []malformedEntry `json:"malformed"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &listed))
	require.Equal(t, []listedSession{
		{ID: "s1", URL: "https://example.com/a", Interval: "2s", Paused: true, Method: "GET", Expect: "200-399"},
		{ID: "s2", URL: "http://bob:xxxxx@example.com/b", Interval: "250ms", Method: "GET", Expect: "200-399"},
	}, listed.Sessions)
	require.Equal(t, []malformedEntry{{ID: "bad", Reason: "session: malformed: url missing or blank"}}, listed.Malformed)

	r = cli("rm", "s1", "bad")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "removed s1\nremoved bad\n", r.stdout)

	// A missing session fails the command before anything changes.
	r = cli("resume", "nope", "s2")
	require.Equal(t, exitFailure, r.code)
	require.Empty(t, r.stdout)
	require.Equal(t, "pollworker: sessions resume: nothing changed: session nope not found\n", r.stderr)
	r = cli("rm", "nope")
	require.Equal(t, exitFailure, r.code)
	require.Equal(t, "pollworker: sessions rm: nothing changed: session nope not found\n", r.stderr)

	r = cli("list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "s2  http://bob:xxxxx@example.com/b  250ms     no")
	require.Contains(t, r.stdout, "1 session: 1 active, 0 paused; 0 malformed\n")
}

// TestSessionsEachAllOrNothing: pause, resume and rm check every id (syntax
// and existence) before changing any (issue 10, item 10: `sessions pause
// api-3 nosuch` paused api-3, then failed on nosuch).
func TestSessionsEachAllOrNothing(t *testing.T) {
	mr, url := miniURL(t)
	cli := func(args ...string) result {
		t.Helper()
		return runApp(t, append([]string{"sessions", "--redis-url", url}, args...)...)
	}
	for _, id := range []string{"api-1", "api-2", "api-3"} {
		r := cli("add", "--id", id, "--url", "https://example.com/"+id, "--interval", "5s")
		require.Equal(t, exitOK, r.code, r.stderr)
	}
	mr.Set("session:broken", `{"url":"https://example.com/","interval":"1ms"}`)
	_, err := mr.SAdd(keyspace.Space{}.SessionBucketOf("broken"), "broken")
	require.NoError(t, err)
	snapshot := func() map[string]string {
		out := map[string]string{}
		for _, k := range mr.Keys() {
			if v, err := mr.Get(k); err == nil {
				out[k] = v
			} else if m, err := mr.Members(k); err == nil {
				out[k] = strings.Join(m, ",")
			}
		}
		return out
	}
	before := snapshot()

	tests := []struct {
		name string
		give []string
		code int
		want string
	}{
		{name: "pause with a missing id", give: []string{"pause", "api-3", "nosuch"}, code: exitFailure,
			want: "pollworker: sessions pause: nothing changed: session nosuch not found\n"},
		{name: "rm with missing ids", give: []string{"rm", "api-1", "nosuch", "api-2", "gone"}, code: exitFailure,
			want: "pollworker: sessions rm: nothing changed: session nosuch not found; session gone not found\n"},
		{name: "pause with an invalid id", give: []string{"pause", "api-3", "a{b"}, code: exitUsage,
			want: "pollworker: sessions pause: nothing changed: invalid session id \"a{b\" has byte '{' at 1 (allowed: letters, digits, . _ - : @ /)\n"},
		{name: "rm of an invalid id", give: []string{"rm", "a{b"}, code: exitUsage,
			want: "pollworker: sessions rm: nothing changed: invalid session id \"a{b\" has byte '{' at 1 (allowed: letters, digits, . _ - : @ /)\n"},
		{name: "remove, rm's other name", give: []string{"remove", "nosuch"}, code: exitFailure,
			want: "pollworker: sessions rm: nothing changed: session nosuch not found\n"},
		{name: "rm of an empty id", give: []string{"rm", "api-1", ""}, code: exitUsage,
			want: "pollworker: sessions rm: nothing changed: invalid session id \"\": empty\n"},
		{name: "resume of a malformed session", give: []string{"resume", "api-1", "broken"}, code: exitFailure,
			want: "pollworker: sessions resume: nothing changed: session broken is malformed (interval 1ms is below the minimum 10ms): add it again with --replace or remove it\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cli(tt.give...)
			require.Equal(t, tt.code, r.code, r.stderr)
			require.Equal(t, tt.want, r.stderr)
			require.Empty(t, r.stdout)
			require.Equal(t, before, snapshot(), "nothing changed")
		})
	}

	// All valid: all applied, a repeated id once.
	r := cli("pause", "api-3", "api-1", "api-3")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "paused api-3\npaused api-1\n", r.stdout)
	// rm takes a malformed entry, even one with an invalid id in the index.
	_, err = mr.SAdd(keyspace.Space{}.SessionBucketOf("bad id*"), "bad id*")
	require.NoError(t, err)
	r = cli("rm", "broken", "bad id*", "api-2")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "removed broken\nremoved bad id*\nremoved api-2\n", r.stdout)
	r = cli("list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "2 sessions: 0 active, 2 paused; 0 malformed\n")
}

func TestSessionsEachHelpSaysWhatIsGuaranteed(t *testing.T) {
	for _, c := range []string{"pause", "resume", "rm"} {
		r := runApp(t, "sessions", c, "--help")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "Every ID is checked before anything changes")
		require.Contains(t, r.stdout, "If any check fails, nothing is changed;")
		require.Contains(t, r.stdout, "That is not one atomic\n")
	}
}

func TestPartial(t *testing.T) {
	err := errors.New("i/o timeout")
	require.Equal(t, "paused a, b; failed on c: i/o timeout; not attempted: d, e", partial("paused", []string{"a", "b"}, "c", err, []string{"d", "e"}))
	require.Equal(t, "nothing changed; failed on a: i/o timeout", partial("paused", nil, "a", err, nil))
}

func TestSessionsInvalidInput(t *testing.T) {
	// Nothing listens on port 1: these must fail before connecting.
	const down = "redis://127.0.0.1:1"
	tests := []struct {
		name string
		give []string
		want string
	}{
		{name: "interval too short", give: []string{"add", "--id", "s1", "--url", "http://x/", "--interval", "1ms"},
			want: "pollworker: invalid session: interval 1ms is below the minimum 10ms\n"},
		{name: "interval too long", give: []string{"add", "--id", "s1", "--url", "http://x/", "--interval", "100000h"},
			want: "pollworker: invalid session: interval 100000h0m0s is above the maximum 24h0m0s\n"},
		{name: "bad id", give: []string{"add", "--id", "a b", "--url", "http://x/", "--interval", "1s"},
			want: "pollworker: invalid session: id \"a b\" has byte ' ' at 1 (allowed: letters, digits, . _ - : @ /)\n"},
		{name: "bad label", give: []string{"add", "--id", "s1", "--url", "http://x/", "--interval", "1s", "--label", "novalue"},
			want: "pollworker: --label \"novalue\" must be key=value\n"},
		{name: "duplicate label", give: []string{"add", "--id", "s1", "--url", "http://x/", "--interval", "1s", "--label", "a=1", "--label", "a=2"},
			want: "pollworker: --label key \"a\" given twice\n"},
		{name: "missing flags", give: []string{"add", "--id", "s1"},
			want: "pollworker: sessions add: Required flag \"url\" not set (see pollworker sessions add --help)\n"},
		{name: "neither interval nor schedule", give: []string{"add", "--id", "s1", "--url", "http://x/"},
			want: "pollworker: invalid session: interval missing or zero (a session has exactly one of interval and schedule)\n"},
		{name: "both interval and schedule", give: []string{"add", "--id", "s1", "--url", "http://x/", "--interval", "1s", "--schedule", "@hourly"},
			want: "pollworker: invalid session: schedule and interval are both set: a session has exactly one of interval and schedule\n"},
		{name: "invalid schedule", give: []string{"add", "--id", "s1", "--url", "http://x/", "--schedule", "*/5 * * *"},
			want: "pollworker: invalid session: schedule \"*/5 * * *\" has 4 fields, want 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)\n"},
		{name: "unknown zone", give: []string{"add", "--id", "s1", "--url", "http://x/", "--schedule", "@daily", "--tz", "Europe/Atlantis"},
			want: "pollworker: invalid session: tz \"Europe/Atlantis\" is not a known IANA zone (such as Europe/Berlin)\n"},
		{name: "unknown catchup", give: []string{"add", "--id", "s1", "--url", "http://x/", "--schedule", "@daily", "--catchup", "most"},
			want: "pollworker: invalid session: catchup \"most\" is not one of skip, latest, all\n"},
		{name: "tz without schedule", give: []string{"add", "--id", "s1", "--url", "http://x/", "--interval", "1s", "--tz", "UTC"},
			want: "pollworker: invalid session: tz is set without schedule (it applies to scheduled sessions only)\n"},
		{name: "no ids", give: []string{"pause"}, want: "pollworker: sessions pause: give at least one session id\n"},
		{name: "bad redis url", give: []string{"list", "--redis-url", "redis://h:1/x"},
			want: "pollworker: invalid config: --redis-url: redis: invalid database number: \"x\"\n"},
		{name: "bad timeout", give: []string{"list", "--timeout", "0s"},
			want: "pollworker: invalid config: --timeout (0s) must be positive and at most 24h0m0s\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runApp(t, append([]string{"sessions", "--redis-url", down}, tt.give...)...)
			require.Equal(t, exitUsage, r.code)
			require.Equal(t, tt.want, r.stderr)
		})
	}
}

// TestSessionsAddRefusesUnpollableURLs: `sessions add` refuses what the
// built-in poller can never poll, with one line naming the rule, exit 2 and
// nothing written (issue 10, item 8).
func TestSessionsAddRefusesUnpollableURLs(t *testing.T) {
	mr, url := miniURL(t)
	const rule = "pollworker: invalid session: url must be an absolute http or https URL with a host; "
	const ruleHint = " (the keyspace's url-rule is http; see sessions config --url-rule)\n"
	tests := []struct {
		give string
		want string
	}{
		{"not a url", rule + "it has no scheme" + ruleHint},
		{"ftp://example.com/file", rule + "its scheme is \"ftp\"" + ruleHint},
		{"file:///etc/passwd", rule + "its scheme is \"file\"" + ruleHint},
		{"javascript:alert(1)", rule + "its scheme is \"javascript\"" + ruleHint},
		{"/relative/path", rule + "it has no scheme" + ruleHint},
		{"http://", "pollworker: invalid session: url is an http URL without host\n"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			r := runApp(t, "sessions", "--redis-url", url, "add", "--id", "s1", "--url", tt.give, "--interval", "5s")
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Equal(t, tt.want, r.stderr)
			require.Empty(t, r.stdout)
			require.Empty(t, mr.Keys(), "nothing written")
		})
	}
	r := runApp(t, "sessions", "--redis-url", url, "add", "--id", "s1", "--url", "http://example.com/", "--interval", "24h")
	require.Equal(t, exitOK, r.code, r.stderr)
}

func TestSessionsRedisDown(t *testing.T) {
	r := runApp(t, "sessions", "list", "--redis-url", "redis://127.0.0.1:1", "--timeout", "500ms")
	require.Equal(t, exitFailure, r.code)
	oneLine(t, r.stderr)
	require.Contains(t, r.stderr, "pollworker: load sessions: ")
}

func newTestStore(t *testing.T, mr *miniredis.Miniredis) *session.Store {
	t.Helper()
	store, err := session.NewStore(newTestClient(t, mr), keyspace.Space{})
	require.NoError(t, err)
	return store
}

// TestSessionsOverlappingPrefixesRefused: a session prefix inside the worker
// namespace is refused before anything is written (issue 10, item 9: it
// wrote session 7 at poll:sessions:7, the key of index bucket 7, and every
// later `sessions list` failed with WRONGTYPE).
func TestSessionsOverlappingPrefixesRefused(t *testing.T) {
	mr, url := miniURL(t)
	for _, flags := range [][]string{
		{"--session-prefix", "poll:sessions"},
		{"--session-prefix", "poll"},
		{"--key-prefix", "session:x"},
	} {
		args := append([]string{"sessions", "--redis-url", url}, flags...)
		r := runApp(t, append(args, "add", "--id", "7", "--url", "http://example.com/", "--interval", "1s")...)
		require.Equal(t, exitUsage, r.code, r.stderr)
		oneLine(t, r.stderr)
		require.Contains(t, r.stderr, "pollworker: invalid config: --key-prefix ")
		require.Contains(t, r.stderr, "overlap: neither may equal the other or start with the other followed by \":\"")
		require.Empty(t, r.stdout)
		require.Empty(t, mr.Keys(), "nothing written")
	}
	r := runApp(t, "sessions", "--redis-url", url, "list")
	require.Equal(t, exitOK, r.code, r.stderr)
}

// TestRedisURLPortRange: a port out of range is a configuration error,
// exit 2, not a failure to connect later (issue 10, item 12).
func TestRedisURLPortRange(t *testing.T) {
	for _, give := range []string{"redis://127.0.0.1:99999/0", "redis://127.0.0.1:0/0"} {
		r := runApp(t, "sessions", "list", "--redis-url", give)
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Regexp(t, `^pollworker: invalid config: --redis-url port \d+ must be from 1 to 65535\n$`, r.stderr)
	}
}

// TestSessionsWriteToAFullRedis: a write Redis refuses for want of memory
// (maxmemory) says what to do, not only Redis's "OOM command not allowed",
// and changes nothing.
func TestSessionsWriteToAFullRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	r := runApp(t, "sessions", "--redis-url", srv.URL(), "add", "--id", "a", "--url", "http://127.0.0.1:1/", "--interval", "1s")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NoError(t, client.ConfigSet(ctxT(t), "maxmemory", "1").Err()) // below what it holds

	for _, args := range [][]string{
		{"add", "--id", "b", "--url", "http://127.0.0.1:1/", "--interval", "1s"},
		{"pause", "a"},
	} {
		r := runApp(t, append([]string{"sessions", "--redis-url", srv.URL()}, args...)...)
		require.Equal(t, exitFailure, r.code, r.stderr)
		require.Contains(t, r.stderr, "OOM command not allowed")
		require.Contains(t, r.stderr, "Redis is over its maxmemory and refuses writes; free memory or raise maxmemory, then run the command again")
	}
	require.NoError(t, client.ConfigSet(ctxT(t), "maxmemory", "0").Err())
	r = runApp(t, "sessions", "--redis-url", srv.URL(), "list")
	require.Contains(t, r.stdout, "1 session: 1 active, 0 paused")
}
