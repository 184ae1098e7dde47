package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

// TestResultsFollowChangedRealBinary (issue 24 item 5, acceptance): the
// built binary polls a target whose body changes every 3 polls, and
// pollworker results --follow --changed prints one JSON line per change
// of the body and none for the polls in between; each line carries the
// body hash and, with --record-body, the body.
func TestResultsFollowChangedRealBinary(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	r := runApp(t, "init", "--redis-url", srv.URL())
	require.Equal(t, exitOK, r.code, r.stderr)

	var mu sync.Mutex
	served := 0
	tg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		version := served / 3 // a new body every 3 polls
		served++
		mu.Unlock()
		fmt.Fprintf(w, "version %d", version)
	}))
	t.Cleanup(tg.Close)
	addSession(t, client, "s1", tg.URL)

	follower := exec.Command(binary(t), "results", "--follow", "--changed", "--redis-url", srv.URL())
	followed, err := follower.StdoutPipe()
	require.NoError(t, err)
	var followErr syncBuffer
	follower.Stderr = &followErr
	require.NoError(t, follower.Start())
	var lines []string
	var linesMu sync.Mutex
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(followed)
		for sc.Scan() {
			linesMu.Lock()
			lines = append(lines, sc.Text())
			linesMu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = follower.Process.Kill(); <-scanned; _ = follower.Wait() })

	worker := exec.Command(binary(t), append([]string{"run", "--redis-url", srv.URL(), "--id", "w1", "--record-body", "16"}, fastTimings...)...)
	var workerErr syncBuffer
	worker.Stderr = &workerErr
	require.NoError(t, worker.Start())
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	t.Cleanup(func() { _ = worker.Process.Kill(); <-exited })

	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return served >= 13 }, 60*time.Second, 10*time.Millisecond, workerErr.String())
	require.NoError(t, worker.Process.Signal(syscall.SIGTERM)) // drains: every poll sent is recorded
	select {
	case err := <-exited:
		require.NoError(t, err, workerErr.String())
		exited <- err
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop: " + workerErr.String())
	}
	mu.Lock()
	polls := served
	mu.Unlock()
	versions := (polls + 2) / 3

	// Every poll is in the stream; --changed printed the changes only.
	all := runApp(t, "results", "--redis-url", srv.URL(), "--json", "--limit", "1000")
	require.Equal(t, exitOK, all.code, all.stderr)
	require.Equal(t, polls, strings.Count(all.stdout, "\n"), "one result per poll")
	require.Eventually(t, func() bool { linesMu.Lock(); defer linesMu.Unlock(); return len(lines) >= versions },
		30*time.Second, 10*time.Millisecond, followErr.String())
	linesMu.Lock()
	defer linesMu.Unlock()
	require.Len(t, lines, versions, "one line per body change: %d polls, a new body every 3", polls)
	for i, line := range lines {
		var got resultJSON
		require.NoError(t, json.Unmarshal([]byte(line), &got), line)
		require.True(t, got.Changed)
		require.Equal(t, "s1", got.Session)
		require.Equal(t, 200, got.Status)
		require.Equal(t, fmt.Sprintf("version %d", i), got.Body)
		require.Equal(t, sha256Hex(fmt.Sprintf("version %d", i)), got.BodySHA)
	}
	var changed []int
	for i, line := range strings.Split(strings.TrimSpace(all.stdout), "\n") {
		var got resultJSON
		require.NoError(t, json.Unmarshal([]byte(line), &got), line)
		if got.Changed {
			changed = append(changed, i)
		}
	}
	for i, at := range changed {
		require.Equal(t, 3*i, at, "the polls that changed are every third: %v", changed)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
