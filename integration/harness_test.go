package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
)

// binary is the pollworker executable built once by TestMain.
var binary string

// binaryEnv names a pollworker executable to test instead of building
// ../cmd/pollworker: a build of an older commit, to check that a
// regression test fails without its fix.
const binaryEnv = "POLLWORKER_IT_BINARY"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pollworker-it")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "pollworker")
	if b := os.Getenv(binaryEnv); b != "" {
		binary = b
		fmt.Fprintf(os.Stderr, "integration: testing %s=%s, not a build of this tree\n", binaryEnv, b)
	} else {
		build := exec.Command("go", "build", "-o", binary, "../cmd/pollworker")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "integration: build pollworker:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// poll is one request seen by the target.
type poll struct {
	session, worker string
	token           int64
	at              time.Time
}

// target is a fence-checking HTTP server: it records every poll and flags a
// token lower than the highest seen for its session, and a token used by
// two workers.
type target struct {
	srv *http.Server
	URL string

	mu         sync.Mutex
	polls      []poll
	maxToken   map[string]int64
	tokenOwner map[string]string // session/token -> worker
	violations []string
	stale      []poll // requests with a token below the highest seen
}

func newTarget(t *testing.T) *target {
	t.Helper()
	tg := &target{maxToken: map[string]int64{}, tokenOwner: map[string]string{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tg.URL = "http://" + l.Addr().String()
	tg.srv = &http.Server{Handler: tg, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = tg.srv.Serve(l) }()
	t.Cleanup(func() { _ = tg.srv.Close() })
	return tg
}

func (tg *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s, wk := r.Header.Get("X-Poll-Session"), r.Header.Get("X-Poll-Worker")
	tok, err := strconv.ParseInt(r.Header.Get("X-Poll-Token"), 10, 64)
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if s == "" || wk == "" || err != nil {
		tg.violations = append(tg.violations, fmt.Sprintf("bad headers %v", r.Header))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if tok < tg.maxToken[s] {
		// Rejected, as a fenced downstream does; whether it may happen at
		// all is for the test to judge (see staleStartedBefore).
		tg.stale = append(tg.stale, poll{session: s, worker: wk, token: tok, at: time.Now()})
		w.WriteHeader(http.StatusConflict)
		return
	}
	tg.maxToken[s] = tok
	k := s + "/" + strconv.FormatInt(tok, 10)
	if o, ok := tg.tokenOwner[k]; ok && o != wk {
		tg.violations = append(tg.violations, fmt.Sprintf("token %s used by %s and %s", k, o, wk))
	}
	tg.tokenOwner[k] = wk
	tg.polls = append(tg.polls, poll{session: s, worker: wk, token: tok, at: time.Now()})
	w.WriteHeader(http.StatusNoContent)
}

// since returns the polls at or after t.
func (tg *target) since(t time.Time) []poll {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	var out []poll
	for i := len(tg.polls) - 1; i >= 0 && !tg.polls[i].at.Before(t); i-- {
		out = append(out, tg.polls[i])
	}
	return out
}

func (tg *target) check(t *testing.T) {
	t.Helper()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	require.Empty(t, tg.violations)
	require.Empty(t, tg.stale, "stale fencing tokens")
}

// staleRequests returns the requests rejected for a stale token.
func (tg *target) staleRequests() []poll {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]poll(nil), tg.stale...)
}

// pollStart finds, in the worker's results stream, when the poll of
// (session, worker, token) that reached the target last started.
func pollStart(t *testing.T, redisURL string, p poll) (time.Time, bool) {
	t.Helper()
	c := redistest.Client(t, redisURL)
	entries, err := c.XRevRangeN(context.Background(), "poll:results", "+", "-", 20000).Result()
	require.NoError(t, err)
	for _, e := range entries {
		if e.Values["session"] == p.session && e.Values["worker"] == p.worker && e.Values["token"] == strconv.FormatInt(p.token, 10) {
			ms, err := strconv.ParseInt(fmt.Sprint(e.Values["at"]), 10, 64)
			require.NoError(t, err)
			return time.UnixMilli(ms), true
		}
	}
	return time.Time{}, false
}

// worker is one pollworker run process.
type worker struct {
	id   string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan struct{}
	err  error
	mu   sync.Mutex
}

// timings used by the process tests: short, with TTL = 3 × renew.
var fastFlags = []string{
	"--lease-ttl", "3s", "--renew-interval", "1s",
	"--heartbeat-interval", "500ms", "--discovery-interval", "1s",
	"--drain-timeout", "5s", "--log-level", "info",
}

func startWorker(t *testing.T, redisURL, id string, extra ...string) *worker {
	t.Helper()
	args := append([]string{"run", "--redis-url", redisURL, "--id", id, "--http-addr", ""}, fastFlags...)
	args = append(args, extra...)
	w := &worker{id: id, log: &bytes.Buffer{}, done: make(chan struct{})}
	w.cmd = exec.Command(binary, args...)
	w.cmd.Stdout, w.cmd.Stderr = &lockedWriter{w: w.log, mu: &w.mu}, &lockedWriter{w: w.log, mu: &w.mu}
	require.NoError(t, w.cmd.Start())
	go func() { w.err = w.cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		_ = w.cmd.Process.Signal(syscall.SIGCONT)
		_ = w.cmd.Process.Kill()
		<-w.done
		if t.Failed() {
			w.mu.Lock()
			t.Logf("log of %s:\n%s", w.id, w.log.String())
			w.mu.Unlock()
		}
	})
	return w
}

func (w *worker) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(sig))
}

func (w *worker) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case <-w.done:
		return w.err
	case <-time.After(limit):
		t.Fatalf("%s did not exit within %v", w.id, limit)
		return nil
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// pollworker runs a one-shot CLI command and returns its combined output.
func pollworker(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	return string(out), err
}

// startRedis starts a test's own redis-server and declares its keyspace
// fresh (markFresh).
func startRedis(t *testing.T) *redistest.Server {
	t.Helper()
	rds := redistest.Start(t)
	markFresh(t, rds.Client(t))
	return rds
}

// markFresh declares the default keyspace of a new redis-server fresh
// (lease.MarkFresh): no lease was ever granted there, so workers started on
// it take leases at once instead of waiting one loss quarantine. Never
// call it after a fault that lost data: that would lift the quarantine
// the fault is meant to trigger.
func markFresh(t *testing.T, c lease.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := lease.MarkFresh(ctx, c, keyspace.Space{})
	require.NoError(t, err, "mark the keyspace fresh")
}
