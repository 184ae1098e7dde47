package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/session"
)

// TestSessionsAddRequestFields: the request flags of sessions add reach
// the store, sessions get shows them, and export then apply round-trips
// them (issue 24 item 1).
func TestSessionsAddRequestFields(t *testing.T) {
	mr, url := miniURL(t)
	cli := func(args ...string) result {
		t.Helper()
		return runApp(t, append([]string{"sessions", "--redis-url", url}, args...)...)
	}
	bodyFile := filepath.Join(t.TempDir(), "body.json")
	require.NoError(t, os.WriteFile(bodyFile, []byte(`{"q": "status"}`), 0o600))

	r := cli("add", "--id", "p1", "--url", "http://example.com/post", "--interval", "5s", "--method", "post",
		"--header", "Content-Type: application/json", "--header", "Accept: application/json",
		"--body-file", bodyFile, "--expect", "201, 204", "--profile", "github", "--poll-timeout", "750ms")
	require.Equal(t, exitOK, r.code, r.stderr)

	want := session.Session{ID: "p1", URL: "http://example.com/post", Interval: session.Duration(5 * time.Second),
		Method: "POST", Headers: map[string]string{"Content-Type": "application/json", "Accept": "application/json"},
		Body: `{"q": "status"}`, Expect: "201,204", Profile: "github", Timeout: session.Duration(750 * time.Millisecond)}
	got, err := newTestStore(t, mr).Get(ctxT(t), "p1")
	require.NoError(t, err)
	require.Equal(t, want, got)

	r = cli("get", "p1")
	require.Equal(t, exitOK, r.code, r.stderr)
	for _, line := range []string{"method:", "POST", "Accept: application/json; Content-Type: application/json",
		`body:`, `"{\"q\": \"status\"}"`, "expect:", "201,204", "profile:", "github", "timeout:", "750ms"} {
		require.Contains(t, r.stdout, line)
	}

	r = cli("export")
	require.Equal(t, exitOK, r.code, r.stderr)
	file := filepath.Join(t.TempDir(), "s.yaml")
	require.NoError(t, os.WriteFile(file, []byte(r.stdout), 0o600))
	require.NoError(t, newTestStore(t, mr).Delete(ctxT(t), "p1"))
	r = cli("apply", "-f", file)
	require.Equal(t, exitOK, r.code, r.stderr)
	got, err = newTestStore(t, mr).Get(ctxT(t), "p1")
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// TestSessionsAddRefusesBadRequestFields: one line naming the rule, exit
// 2, nothing written.
func TestSessionsAddRefusesBadRequestFields(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--method", "TRACE"}, `method "TRACE" is not one of GET, HEAD, POST, PUT, PATCH, DELETE`},
		{[]string{"--header", "X-Poll-Token: 99"}, "headers X-Poll-Token is a fencing header the worker always sends"},
		{[]string{"--header", "Authorization: Bearer s3cret"}, "headers Authorization holds credentials: put it in a worker-side profile"},
		{[]string{"--header", "no colon"}, `--header "no colon" must be 'Name: value'`},
		{[]string{"--body", "x"}, "body is not sent with GET"},
		{[]string{"--body", "x", "--body-file", "/nonexistent", "--method", "POST"}, "give --body or --body-file, not both"},
		{[]string{"--body-file", "/nonexistent", "--method", "POST"}, "--body-file: open /nonexistent"},
		{[]string{"--expect", "2xx"}, `--expect: "2xx" is not a status code from 100 to 599`},
		{[]string{"--profile", "a b"}, `profile "a b" may hold only letters, digits and . _ -`},
		{[]string{"--poll-timeout", "5ms"}, "timeout 5ms is not from 10ms to 5m0s"},
		{[]string{"--poll-timeout", "2s"}, "timeout 2s is longer than the interval 1s"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			mr, url := miniURL(t)
			args := append([]string{"sessions", "--redis-url", url, "add", "--id", "s1", "--url", "http://example.com/", "--interval", "1s"}, tt.args...)
			r := runApp(t, args...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, tt.want)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, r.stderr)
			require.Empty(t, mr.Keys())
		})
	}
}

// TestRunProfilesFlag: a bad profiles file stops run at start (exit 2,
// naming the file and the rule); a good one announces its profiles as
// labels.
func TestRunProfilesFlag(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("profiles:\n  gh: {bearer_token: x}\n"), 0o600))
	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, []byte("profiles:\n  gh: {bearer_token_file: /nonexistent}\n"), 0o600))

	r := runApp(t, "run", "--redis-url", "redis://127.0.0.1:1", "--profiles", bad, "--dry-run")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "--profiles: "+bad+": httppoll: invalid profiles")
	require.Contains(t, r.stderr, "field bearer_token not found")

	r = runApp(t, "run", "--redis-url", "redis://127.0.0.1:1", "--max-retry-after", "-1s", "--dry-run")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "--max-retry-after (-1s) must not be negative")

	r = runApp(t, "run", "--redis-url", "redis://127.0.0.1:1", "--profiles", good, "--labels", "zone=a", "--dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "profile/gh=yes,zone=a")
}
