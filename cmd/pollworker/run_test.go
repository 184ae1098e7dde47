package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/httppoll"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// fastTimings are run flags that make a worker react within a second.
var fastTimings = []string{
	"--lease-ttl", "900ms", "--renew-interval", "300ms", "--heartbeat-interval", "100ms",
	"--discovery-interval", "200ms", "--drain-timeout", "2s", "--http-addr", "127.0.0.1:0",
}

// target is an HTTP server that records the poll headers it receives.
type target struct {
	*httptest.Server
	mu    sync.Mutex
	polls []http.Header
}

func newTarget(t *testing.T) *target {
	t.Helper()
	tg := &target{}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.mu.Lock()
		tg.polls = append(tg.polls, r.Header.Clone())
		tg.mu.Unlock()
	}))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) received() []http.Header {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]http.Header(nil), tg.polls...)
}

func addSession(t *testing.T, c redis.UniversalClient, id, url string) {
	t.Helper()
	store, err := session.NewStore(c, keyspace.Space{})
	require.NoError(t, err)
	require.NoError(t, store.Put(ctxT(t), session.Session{ID: id, URL: url, Interval: session.Duration(100 * time.Millisecond)}))
}

// TestRunRedisDownAtStart starts a worker while Redis is down: it serves
// /healthz, reports not ready, and once Redis is up it becomes ready and
// polls; cancelling its context drains it and exits 0.
func TestRunRedisDownAtStart(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	tg := newTarget(t)

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	args := append([]string{"pollworker", "run", "--redis-url", srv.URL(), "--id", "w1"}, fastTimings...)
	go func() { done <- run(ctx, args, &stdout, &stderr, nil) }()

	var addr string
	require.Eventually(t, func() bool { addr = httpAddrIn(stderr.String()); return addr != "" }, 10*time.Second, 10*time.Millisecond, stderr.String())
	code, body := get("http://" + addr + "/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	code, _ = get("http://" + addr + "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Empty(t, tg.received())
	select {
	case c := <-done:
		t.Fatalf("the worker exited (%d) with Redis down: %s", c, stderr.String())
	default:
	}

	srv.Restart()
	client := srv.Client(t)
	addSession(t, client, "s1", tg.URL+"/poll")
	require.Eventually(t, func() bool { code, _ := get("http://" + addr + "/readyz"); return code == http.StatusOK },
		15*time.Second, 20*time.Millisecond, stderr.String())
	require.Eventually(t, func() bool { return len(tg.received()) >= 2 }, 10*time.Second, 10*time.Millisecond)
	h := tg.received()[0]
	require.Equal(t, "s1", h.Get(httppoll.HeaderSession))
	require.Equal(t, "w1", h.Get(httppoll.HeaderWorker))
	token, err := strconv.Atoi(h.Get(httppoll.HeaderToken))
	require.NoError(t, err)
	require.Positive(t, token)
	require.Equal(t, "pollworker/dev", h.Get("User-Agent"))
	require.Eventually(t, func() bool {
		res, err := client.XRange(ctxT(t), "poll:results", "-", "+").Result()
		return err == nil && len(res) > 0 && res[0].Values["worker"] == "w1" && res[0].Values["status"] == "200"
	}, 5*time.Second, 10*time.Millisecond)

	// Metrics after real polls: owned lease, ok polls, an acquisition.
	require.Eventually(t, func() bool {
		code, body := get("http://" + addr + "/metrics")
		return code == http.StatusOK &&
			strings.Contains(body, "pollworker_leases_held 1\n") &&
			strings.Contains(body, `pollworker_lease_events_total{event="acquired",reason="none"} 1`) &&
			strings.Contains(body, `pollworker_polls_total{outcome="ok"}`) &&
			strings.Contains(body, "pollworker_leases_renewed_total ") &&
			!strings.Contains(body, "pollworker_leases_renewed_total 0\n") &&
			strings.Contains(body, "pollworker_live_nodes 1\n") &&
			strings.Contains(body, "pollworker_polls_late_total ") &&
			strings.Contains(body, "pollworker_polls_waiting 0\n") &&
			strings.Contains(body, "pollworker_sessions_backoff 0\n") &&
			strings.Contains(body, "pollworker_behind 0\n") &&
			strings.Contains(body, "pollworker_results_written_total ")
	}, 10*time.Second, 20*time.Millisecond)

	cancel()
	require.Eventually(t, func() bool {
		select {
		case c := <-done:
			require.Equal(t, exitOK, c, stderr.String())
			return true
		default:
			return false
		}
	}, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, stderr.String(), `"msg":"worker stopped"`)
	require.NotContains(t, stderr.String(), `"level":"error"`)
	// It left: no member, no lease.
	require.Zero(t, client.ZCard(ctxT(t), "poll:nodes").Val())
	require.Zero(t, client.Exists(ctxT(t), "poll:lease:{s1}").Val())
	code, _ = get("http://" + addr + "/healthz")
	require.Zero(t, code, "the health server is closed")
}

// TestRunSignals runs the binary against a real Redis: SIGTERM, SIGINT
// and SIGHUP drain the worker, which exits 0 and leaves the membership
// (SIGHUP killed it without a drain: Go's default).
func TestRunSignals(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	tg := newTarget(t)
	addSession(t, client, "s1", tg.URL)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			id := "w-" + strings.ToLower(strings.ReplaceAll(sig.String(), " ", "-"))
			args := append([]string{"run", "--redis-url", srv.URL(), "--id", id}, fastTimings...)
			cmd := exec.Command(binary(t), args...)
			var stdout, stderr syncBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Start())
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})

			var addr string
			require.Eventually(t, func() bool { addr = httpAddrIn(stderr.String()); return addr != "" }, 10*time.Second, 10*time.Millisecond)
			require.Eventually(t, func() bool { code, _ := get("http://" + addr + "/readyz"); return code == http.StatusOK },
				10*time.Second, 10*time.Millisecond, stderr.String())
			require.Eventually(t, func() bool {
				return client.Exists(ctxT(t), "poll:lease:{s1}").Val() == 1
			}, 10*time.Second, 10*time.Millisecond)

			require.NoError(t, cmd.Process.Signal(sig))
			var err error
			require.Eventually(t, func() bool {
				select {
				case err = <-exited:
					exited <- err // for the cleanup
					return true
				default:
					return false
				}
			}, 10*time.Second, 10*time.Millisecond)
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("exit %d: %s", ee.ExitCode(), stderr.String())
			}
			require.NoError(t, err)
			logs := stderr.String()
			require.Contains(t, logs, `"msg":"worker stopped"`)
			require.Empty(t, stdout.String())
			members, err := client.ZRange(ctxT(t), "poll:nodes", 0, -1).Result()
			require.NoError(t, err)
			require.NotContains(t, members, id)
			require.Zero(t, client.Exists(ctxT(t), "poll:lease:{s1}").Val(), fmt.Sprintf("released by %s", id))
		})
	}
}

// waitExit waits, with a deadline, for the exit code of an in-process run.
func waitExit(t *testing.T, done <-chan int, stderr *syncBuffer) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker did not exit: %s", stderr.String())
		return 0
	}
}

// TestRunDuplicateIDExits2 (issue 10, item 5): a second worker started with
// the --id of a live one refuses to start, exit 2, naming the holder; the
// first keeps its membership.
func TestRunDuplicateIDExits2(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	addr := startRunWorker(t, srv.URL(), "dup")
	require.Eventually(t, func() bool { code, _ := get("http://" + addr + "/readyz"); return code == http.StatusOK },
		10*time.Second, 10*time.Millisecond)

	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	args := append([]string{"pollworker", "run", "--redis-url", srv.URL(), "--id", "dup"}, fastTimings...)
	go func() { done <- run(ctxT(t), args, &stdout, &stderr, nil) }()
	require.Equal(t, exitUsage, waitExit(t, done, &stderr), stderr.String())
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	require.Contains(t, last, `pollworker: invalid config: --id: nodes: duplicate node id: id "dup" is in use by another live worker (host `)
	require.Contains(t, last, fmt.Sprintf("pid %d", os.Getpid()))
	require.Contains(t, last, "every worker needs its own --id")
	require.NotContains(t, stderr.String(), `"msg":"worker starting"`)

	require.Equal(t, []string{"dup"}, client.ZRange(ctxT(t), "poll:nodes", 0, -1).Val(), "the first worker is still a member")
	code, _ := get("http://" + addr + "/readyz")
	require.Equal(t, http.StatusOK, code)
}

// TestRunRestartAfterCrashWaitsForOldEntry (issue 10, item 5): a worker
// restarted under the id of one that was killed (its entry still there, not
// renewed) waits for that entry to expire, saying so, then starts.
func TestRunRestartAfterCrashWaitsForOldEntry(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	crashed, err := nodes.New(nodes.Config{Client: client, ID: "phoenix", TTL: 1500 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, crashed.Heartbeat(ctxT(t))) // and then kill -9

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	args := append([]string{"pollworker", "run", "--redis-url", srv.URL(), "--id", "phoenix"}, fastTimings...)
	go func() { done <- run(ctx, args, &stdout, &stderr, nil) }()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "waiting for it to expire") },
		10*time.Second, 10*time.Millisecond, stderr.String())
	require.Contains(t, stderr.String(), `"holder_incarnation":"`+crashed.Incarnation()+`"`)
	var addr string
	require.Eventually(t, func() bool {
		addr = httpAddrIn(stderr.String())
		code, _ := get("http://" + addr + "/readyz")
		return code == http.StatusOK
	}, 15*time.Second, 20*time.Millisecond, stderr.String())
	require.Eventually(t, func() bool {
		claim, ok, err := crashed.Claim(ctxT(t))
		return err == nil && ok && claim.Info.Incarnation != crashed.Incarnation()
	}, 5*time.Second, 10*time.Millisecond)
	cancel()
	require.Equal(t, exitOK, waitExit(t, done, &stderr), stderr.String())
}

// runUntilExit runs `pollworker run` in-process with args after the run
// flags and returns its exit code, stderr and how long it took.
func runUntilExit(t *testing.T, args ...string) (int, string, time.Duration) {
	t.Helper()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	start := time.Now()
	all := append(append([]string{"pollworker", "run"}, args...), fastTimings...)
	go func() { done <- run(ctxT(t), all, &stdout, &stderr, nil) }()
	code := waitExit(t, done, &stderr)
	return code, stderr.String(), time.Since(start)
}

// lastLine is the last line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestRunBadCredentialsExit2 (issue 10, item 12): WRONGPASS and NOAUTH are
// not retried as if Redis were down: run exits 2 at once, naming the
// problem, with the password redacted.
func TestRunBadCredentialsExit2(t *testing.T) {
	srv := redistest.Start(t)
	require.NoError(t, srv.Client(t).ConfigSet(ctxT(t), "requirepass", "right-secret").Err())
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "wrong password", give: "redis://:hunter2-wrong@" + srv.Addr() + "/0",
			want: "pollworker: invalid config: --redis-url redis://:xxxxx@" + srv.Addr() + "/0: Redis rejected the user name or password: check the credentials in the URL (Redis said: WRONGPASS"},
		{name: "no password", give: "redis://" + srv.Addr() + "/0",
			want: "pollworker: invalid config: --redis-url redis://" + srv.Addr() + "/0: Redis requires a password: give it as redis://[user]:password@host:port (Redis said: NOAUTH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stderr, took := runUntilExit(t, "--redis-url", tt.give, "--id", "auth-w")
			require.Equal(t, exitUsage, code, stderr)
			require.Contains(t, lastLine(stderr), tt.want)
			require.NotContains(t, stderr, "hunter2-wrong")
			require.NotContains(t, stderr, `"msg":"worker starting"`)
			require.Less(t, took, 5*time.Second)
		})
	}
}

// TestRunNoSuchDatabaseExit2: a database number Redis does not have is
// not retried as if Redis were down (it was: "Redis does not answer yet",
// forever): run and the admin commands exit 2 naming the rule.
func TestRunNoSuchDatabaseExit2(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr() + "/99"
	want := "pollworker: invalid config: --redis-url " + url + ": Redis has no database of that number (the /N at the end of the URL)"
	code, stderr, took := runUntilExit(t, "--redis-url", url, "--id", "db-w")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, lastLine(stderr), want)
	require.NotContains(t, stderr, `"msg":"worker starting"`)
	require.Less(t, took, 5*time.Second)

	r := runApp(t, "sessions", "list", "--redis-url", url)
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stderr, want), "got %q", r.stderr)
}

// TestRunTLSSchemeMismatchExit2 (issue 10, item 12): rediss:// to a
// plain-text server, and redis:// to a TLS-only one, exit 2 within a couple
// of seconds with a hint about the scheme, instead of retrying forever.
func TestRunTLSSchemeMismatchExit2(t *testing.T) {
	plain := redistest.Start(t)
	code, stderr, took := runUntilExit(t, "--redis-url", "rediss://"+plain.Addr()+"/0", "--id", "tls-w")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, lastLine(stderr), "the server does not speak TLS? check rediss:// vs redis://")
	require.Less(t, took, 4*time.Second)

	tlsSrv, _ := redistest.StartTLS(t)
	code, stderr, took = runUntilExit(t, "--redis-url", "redis://"+tlsSrv.Addr()+"/0", "--id", "tls-w")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, lastLine(stderr), "the server speaks TLS")
	require.Contains(t, lastLine(stderr), "check rediss:// vs redis://")
	require.Less(t, took, 6*time.Second)
}

// TestRunHTTPAddrTakenExit2: a worker whose --http-addr is taken refuses at
// start, exit 2, with one line naming the flag and nothing logged before it
// (issue 22: the second worker on one --http-addr exited 1 after an
// unrelated "results recorder stopped" line).
func TestRunHTTPAddrTakenExit2(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	addr := ln.Addr().String()
	var stdout, stderr syncBuffer
	code := run(ctxT(t), []string{"pollworker", "run", "--redis-url", "redis://127.0.0.1:1/0", "--id", "w2", "--http-addr", addr},
		&stdout, &stderr, nil)
	require.Equal(t, exitUsage, code, stderr.String())
	require.Equal(t, "pollworker: invalid config: --http-addr "+addr+": cannot listen: address already in use "+
		"(each worker on a host needs its own --http-addr; \"\" disables the server)\n", stderr.String())
}

func TestReplicaOf(t *testing.T) {
	for _, tc := range []struct {
		name, info, master string
		ok                 bool
	}{
		{"master", "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n", "", false},
		{"replica", "# Replication\r\nrole:slave\r\nmaster_host:10.0.0.5\r\nmaster_port:6379\r\nmaster_link_status:up\r\n", "10.0.0.5:6379", true},
		{"replica, IPv6 master", "role:slave\r\nmaster_host:::1\r\nmaster_port:7000\r\n", "[::1]:7000", true},
		{"INFO says nothing", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			master, ok := replicaOf(tc.info)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.master, master)
		})
	}
}

// TestRunRefusesAReplica: a worker given a replica's URL exits 2 naming
// the master, instead of idling on READONLY errors for as long as it runs.
func TestRunRefusesAReplica(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	r := runApp(t, "run", "--redis-url", replica.URL(), "--http-addr", "")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, fmt.Sprintf("names a replica (of 127.0.0.1:%d)", master.Port))
}

// TestDuplicateIDExitCodes: an id in use by a live worker at start is a
// mistake in the flags (exit 2); an id taken over while this worker was
// paused past its TTL is a runtime event: it said "invalid config" and
// exited 2.
func TestDuplicateIDExitCodes(t *testing.T) {
	var ee *exitError
	err := duplicateIDError(&nodes.DuplicateIDError{ID: "w1"})
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitUsage, ee.code)
	require.ErrorContains(t, err, "invalid config")

	err = duplicateIDError(&nodes.DuplicateIDError{ID: "w1", TakenOver: true})
	require.False(t, errors.As(err, &ee), "not marked: run exits 1")
	require.NotContains(t, err.Error(), "invalid config")
	require.ErrorContains(t, err, "this worker stopped, leaving the id to its successor")
	require.ErrorIs(t, err, nodes.ErrDuplicateID)
}
