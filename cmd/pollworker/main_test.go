package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// binDir holds the pollworker binary built (once) for the tests that need a
// real process: exit codes and signals.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pollworker-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var buildOnce = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "pollworker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
})

// binary returns the path of the pollworker binary, building it on first
// use.
func binary(t *testing.T) string {
	t.Helper()
	bin, err := buildOnce()
	require.NoError(t, err)
	return bin
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// result is the outcome of one in-process run of the app.
type result struct {
	code           int
	stdout, stderr string
}

// runApp runs the app in-process with args (without the program name).
func runApp(t *testing.T, args ...string) result {
	t.Helper()
	return runAppCtx(ctxT(t), args...)
}

func runAppCtx(ctx context.Context, args ...string) result {
	var stdout, stderr syncBuffer
	code := run(ctx, append([]string{"pollworker"}, args...), &stdout, &stderr, nil)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// ctxT is a context bounded by a deadline, cancelled when the test ends.
func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// oneLine requires s to be exactly one line of text.
func oneLine(t *testing.T, s string) {
	t.Helper()
	require.True(t, strings.HasSuffix(s, "\n"), "ends with a newline: %q", s)
	require.Equal(t, 1, strings.Count(s, "\n"), "one line: %q", s)
}

// httpClient does not keep connections, so that no transport goroutine
// outlives a test.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}

// get returns the status code and body of GET url, or 0 if it failed.
func get(url string) (int, string) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var httpAddrRE = regexp.MustCompile(`"http_addr":"([^"]+)"`)

// httpAddrIn finds the health server's address in JSON logs.
func httpAddrIn(logs string) string {
	m := httpAddrRE.FindStringSubmatch(logs)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestUnknownCommand: an unknown command is named, the known ones listed,
// exit 2 (issue 10, item 12: `pollworker bogus` said "No help topic").
func TestUnknownCommand(t *testing.T) {
	r := runApp(t, "bogus")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Equal(t, "pollworker: unknown command \"bogus\" (commands: init, run, sessions, status, results, explain, check, demo, version, drain, uncordon, forget, target; see pollworker --help)\n", r.stderr)
	require.Empty(t, r.stdout)

	r = runApp(t, "sessions", "--redis-url", "redis://127.0.0.1:1", "bogus")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Equal(t, "pollworker: sessions: unknown command \"bogus\" (commands: add, list, get, pause, resume, rm, apply, sync, reweigh, export, config; see pollworker sessions --help)\n", r.stderr)

	// Without arguments they still show their help.
	r = runApp(t)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "COMMANDS:")
	r = runApp(t, "sessions")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "COMMANDS:")
}

// TestExtraArguments: commands that take no arguments refuse them, exit 2,
// before connecting (issue 10, item 12: `sessions list x` ignored x).
func TestExtraArguments(t *testing.T) {
	const down = "redis://127.0.0.1:1"
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"sessions", "--redis-url", down, "list", "extra"},
			"pollworker: sessions list: takes no arguments, got \"extra\" (see pollworker sessions list --help)\n"},
		{[]string{"sessions", "--redis-url", down, "add", "--id", "s1", "--url", "http://x/", "--interval", "1s", "oops"},
			"pollworker: sessions add: takes no arguments, got \"oops\" (see pollworker sessions add --help)\n"},
		{[]string{"status", "--redis-url", down, "now"},
			"pollworker: status: takes no arguments, got \"now\" (see pollworker status --help)\n"},
		{[]string{"run", "--dry-run", "w1"},
			"pollworker: run: takes no arguments, got \"w1\" (see pollworker run --help)\n"},
		{[]string{"version", "x"},
			"pollworker: version: takes no arguments, got \"x\" (see pollworker version --help)\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			r := runApp(t, tt.give...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Equal(t, tt.want, r.stderr)
			require.Empty(t, r.stdout)
		})
	}
}

// TestStatusWatchRange: --watch is 0 or from 100ms to 24h (issue 10, item
// 12: -1s and 1ms were accepted).
func TestStatusWatchRange(t *testing.T) {
	for _, give := range []string{"-1s", "1ms", "99ms", "25h"} {
		r := runApp(t, "status", "--redis-url", "redis://127.0.0.1:1", "--watch", give)
		require.Equal(t, exitUsage, r.code, r.stderr)
		oneLine(t, r.stderr)
		require.Contains(t, r.stderr, "pollworker: invalid config: --watch ")
		require.Contains(t, r.stderr, "must be 0 (print once) or from 100ms to 24h0m0s\n")
	}
	require.NoError(t, validateWatch(0))
	require.NoError(t, validateWatch(minWatch))
	require.NoError(t, validateWatch(maxWatch))
}
