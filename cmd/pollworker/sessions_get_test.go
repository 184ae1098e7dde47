package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// TestSessionsGetAndListWide runs a worker against a real Redis and a
// target on which s-ok answers with an ETag (then 304s) and s-bad with
// 503, and reads what the worker saved with sessions get and sessions list
// --wide, the failing sessions on its status page and the HTTP poll
// metrics.
func TestSessionsGetAndListWide(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write([]byte("hello"))
	}))
	t.Cleanup(tg.Close)
	addSession(t, client, "s-ok", tg.URL+"/ok")
	addSession(t, client, "s-bad", tg.URL+"/bad")
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	require.NoError(t, store.Put(ctxT(t), session.Session{ID: "s-idle", URL: tg.URL + "/idle", Interval: session.Duration(time.Second), Paused: true}))

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	args := append([]string{"pollworker", "run", "--redis-url", srv.URL(), "--id", "w1", "--loss-quarantine", "off"}, fastTimings...)
	go func() { done <- run(ctx, args, &stdout, &stderr, nil) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	states := state.NewStore(client, keyspace.Space{})
	savedState := func(id string) (httppoll.State, state.Record) {
		rec, err := states.Load(ctxT(t), id)
		require.NoError(t, err)
		st, _ := httppoll.DecodeState(rec.Data)
		return st, rec
	}
	require.Eventually(t, func() bool {
		ok, _ := savedState("s-ok")
		bad, _ := savedState("s-bad")
		return ok.Status == http.StatusNotModified && bad.Failures >= 2
	}, 15*time.Second, 10*time.Millisecond, stderr.String())

	cli := func(args ...string) result {
		t.Helper()
		return runApp(t, append([]string{"sessions", "--redis-url", srv.URL()}, args...)...)
	}

	// sessions get: definition, lease, state.
	_, rec := savedState("s-ok")
	r := cli("get", "s-ok")
	require.Equal(t, exitOK, r.code, r.stderr)
	stampRE := `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC \((\d+s ago|just now)\)`
	for _, line := range []string{
		`id:\s+s-ok`,
		`url:\s+` + regexp.QuoteMeta(tg.URL+"/ok"),
		`interval:\s+100ms`,
		`paused:\s+no`,
		`lease:\s+held by w1 \(incarnation \S+\), expires in \S+`,
		`state:\s+saved ` + stampRE + ` by w1 under token \d+`,
		`last saved poll:\s+` + stampRE,
		`status:\s+304, in \S+`,
		`last success:\s+` + stampRE,
		`failures:\s+0`,
		`last change:\s+` + stampRE,
		`backoff:\s+0s`,
		`etag:\s+"v1"`,
		`last-modified:\s+-`,
		`body sha256:\s+2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824`, // sha256("hello")
	} {
		require.Regexp(t, regexp.MustCompile(`(?m)^`+line+`$`), r.stdout)
	}
	require.Contains(t, r.stdout, "under token "+strconv.FormatInt(rec.Token, 10)+"\n")

	r = cli("get", "s-bad", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var v sessionView
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v))
	require.Equal(t, "s-bad", v.Session.ID)
	require.Equal(t, "w1", v.Lease.Holder)
	require.NotNil(t, v.State)
	require.NotNil(t, v.State.HTTP)
	require.Equal(t, http.StatusServiceUnavailable, v.State.HTTP.Status)
	require.Equal(t, "server", v.State.HTTP.Error)
	require.GreaterOrEqual(t, v.State.HTTP.Failures, 2)
	require.False(t, v.State.HTTP.FailingSince.IsZero())
	require.True(t, v.State.HTTP.LastSuccess.IsZero())
	require.Positive(t, v.State.HTTP.BackoffMS)
	require.Positive(t, v.State.Token)

	r = cli("get", "s-idle")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^paused:\s+yes$`, r.stdout)
	require.Regexp(t, `(?m)^lease:\s+not held$`, r.stdout)
	require.Regexp(t, `(?m)^state:\s+none saved yet$`, r.stdout)

	r = cli("get", "nope")
	require.Equal(t, exitFailure, r.code)
	require.Equal(t, "pollworker: session nope not found\n", r.stderr)
	r = cli("get", "a b")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "invalid session id")

	// sessions list --wide: the state's columns.
	r = cli("list", "--wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^ID\s+URL\s+INTERVAL\s+PAUSED\s+LABELS\s+SELECTOR\s+STATUS\s+LATENCY\s+LAST SUCCESS\s+FAILURES\s+LAST CHANGE\s+SAVED BY$`, r.stdout)
	require.Regexp(t, `(?m)^s-bad\s+\S+/bad\s+100ms\s+no\s+-\s+-\s+503\s+\S+\s+-\s+[1-9]\d*\s+(\d+s ago|just now)\s+w1$`, r.stdout)
	require.Regexp(t, `(?m)^s-idle\s+\S+/idle\s+1s\s+yes\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-$`, r.stdout)
	require.Regexp(t, `(?m)^s-ok\s+\S+/ok\s+100ms\s+no\s+-\s+-\s+304\s+\S+\s+current\s+0\s+(\d+s ago|just now)\s+w1$`, r.stdout)
	r = cli("list", "--wide", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var listed struct {
		Sessions []listedSession `json:"sessions"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &listed))
	require.Len(t, listed.Sessions, 3)
	require.Equal(t, []string{"s-bad", "s-idle", "s-ok"}, []string{listed.Sessions[0].ID, listed.Sessions[1].ID, listed.Sessions[2].ID})
	require.Equal(t, 503, listed.Sessions[0].State.HTTP.Status)
	require.Nil(t, listed.Sessions[1].State, "s-idle was never polled")
	require.Equal(t, `"v1"`, listed.Sessions[2].State.HTTP.ETag)
	r = cli("list")
	require.NotContains(t, r.stdout, "STATUS", "the state columns only with --wide")

	// --failing lists the fleet's failing sessions from their saved state.
	r = cli("list", "--failing")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^s-bad\s+503\s+[1-9]\d*\s+\d{4}-.*httppoll: server error: 503 Service Unavailable \(expect 200-399\)$`, r.stdout)
	require.NotContains(t, r.stdout, "s-ok")
	require.Contains(t, r.stdout, "1 failing sessions\n")

	// The status page lists the failing session, with its zone; the
	// metrics count the outcomes.
	addr := httpAddrIn(stderr.String())
	require.NotEmpty(t, addr)
	code, body := get("http://" + addr + "/")
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `<tr class="failing"><td>w1</td><td>s-bad</td><td>[1-9]\d*</td><td>503</td><td class="message">httppoll: server error: 503 Service Unavailable \(expect 200-399\)</td><td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</td>`, body)
	require.NotContains(t, body, `<tr class="failing"><td>w1</td><td>s-ok</td>`)
	require.Eventually(t, func() bool {
		_, body := get("http://" + addr + "/metrics")
		return regexp.MustCompile(`pollworker_http_polls_total\{outcome="server_error"\} [1-9]`).MatchString(body) &&
			regexp.MustCompile(`pollworker_http_polls_total\{outcome="not_modified"\} [1-9]`).MatchString(body) &&
			strings.Contains(body, `pollworker_http_polls_total{outcome="timeout"} 0`+"\n") &&
			strings.Contains(body, `pollworker_http_state_saves_total{result="stale"} 0`+"\n") &&
			strings.Contains(body, "pollworker_http_changes_total 0\n") &&
			strings.Contains(body, "pollworker_http_host_waits_total 0\n")
	}, 5*time.Second, 20*time.Millisecond)
}

func TestRunHTTPFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		give []string
		want string
	}{
		{name: "per host", give: []string{"--max-per-host", "-1"}, want: "--max-per-host (-1) must not be negative (0 = no bound)"},
		{name: "short timeout", give: []string{"--poll-timeout", "1ms"}, want: "--poll-timeout (1ms) must be from 10ms to 5m0s"},
		{name: "long timeout", give: []string{"--poll-timeout", "6m"}, want: "--poll-timeout (6m0s) must be from 10ms to 5m0s"},
		{name: "short idle timeout", give: []string{"--idle-conn-timeout", "1ms"}, want: "--idle-conn-timeout (1ms) must be from 100ms to 1h0m0s, or 0 (never)"},
		{name: "negative idle timeout", give: []string{"--idle-conn-timeout", "-1s"}, want: "--idle-conn-timeout (-1s) must be from 100ms to 1h0m0s, or 0 (never)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := runApp(t, append([]string{"run", "--dry-run"}, tt.give...)...)
			require.Equal(t, exitUsage, res.code)
			oneLine(t, res.stderr)
			require.Contains(t, res.stderr, tt.want)
		})
	}
	res := runApp(t, "run", "--dry-run", "--max-per-host", "0", "--poll-timeout", "30s", "--idle-conn-timeout", "0")
	require.Equal(t, exitOK, res.code, res.stderr)
}

// TestSessionsListWideChunks: list --wide loads the states stateChunk
// sessions at a time and shows those of every chunk.
func TestSessionsListWideChunks(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	store, err := session.NewStore(client, keyspace.Space{})
	require.NoError(t, err)
	n := stateChunk + 5
	all := make([]session.Session, n)
	for i := range all {
		all[i] = session.Session{ID: fmt.Sprintf("c%05d", i), URL: "https://example.com/", Interval: session.Duration(time.Second)}
	}
	require.NoError(t, store.PutMany(ctxT(t), all))
	saved := time.Now().Add(-time.Minute).UnixMilli()
	for _, i := range []int{0, stateChunk - 1, stateChunk, n - 1} {
		st := httppoll.State{Version: httppoll.StateVersion, Worker: fmt.Sprintf("w%d", i), Status: 200 + i%7}
		data, err := json.Marshal(st)
		require.NoError(t, err)
		require.NoError(t, client.HSet(ctxT(t), keyspace.Space{}.State(all[i].ID), "data", data, "token", 7,
			"saved", saved, "polled", saved).Err())
	}

	r := runApp(t, "sessions", "--redis-url", srv.URL(), "list", "--wide")
	require.Equal(t, exitOK, r.code, r.stderr)
	rows := 0
	for _, line := range strings.Split(r.stdout, "\n") {
		f := strings.Fields(line)
		if len(f) < 7 || !strings.HasPrefix(f[0], "c") {
			continue
		}
		rows++
		i, err := strconv.Atoi(f[0][1:])
		require.NoError(t, err)
		switch i {
		case 0, stateChunk - 1, stateChunk, n - 1:
			require.Equal(t, strconv.Itoa(200+i%7), f[6], line)
			require.Equal(t, fmt.Sprintf("w%d", i), f[len(f)-1], line)
		default:
			require.Equal(t, "-", f[6], line)
		}
	}
	require.Equal(t, n, rows)
}

// TestLastSuccessText: a healthy session's state, refreshed only every
// minute, reads as current while it is at most a refresh, an interval and
// stateSlack old; a failing, paused or unpolled one shows the saved age
// (issue 24: a healthy 2 s session showed "last success 52s ago").
func TestLastSuccessText(t *testing.T) {
	now := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	view := func(savedAgo time.Duration, failures int) *stateView {
		return &stateView{Saved: now.Add(-savedAgo), now: now,
			HTTP: &httppoll.State{LastSuccess: now.Add(-savedAgo), Failures: failures}}
	}
	every := func(iv time.Duration) session.Session {
		return session.Session{ID: "s", Interval: session.Duration(iv)}
	}
	paused := every(2 * time.Second)
	paused.Paused = true
	for _, tt := range []struct {
		name string
		v    *stateView
		s    session.Session
		want string
	}{
		{name: "healthy, saved 52s ago", v: view(52*time.Second, 0), s: every(2 * time.Second), want: "current"},
		{name: "healthy, at the bound", v: view(72*time.Second, 0), s: every(2 * time.Second), want: "current"},
		{name: "past the bound", v: view(73*time.Second, 0), s: every(2 * time.Second), want: "1m0s ago"},
		{name: "long interval", v: view(5*time.Minute, 0), s: every(10 * time.Minute), want: "current"},
		{name: "failing", v: view(10*time.Second, 3), s: every(2 * time.Second), want: "10s ago"},
		{name: "paused", v: view(10*time.Second, 0), s: paused, want: "10s ago"},
		{name: "no interval (a schedule)", v: view(10*time.Second, 0), s: every(0), want: "10s ago"},
		{name: "never succeeded", v: &stateView{Saved: now, now: now, HTTP: &httppoll.State{Failures: 0}}, s: every(time.Second), want: "-"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, lastSuccessText(tt.v, tt.s))
		})
	}
}
