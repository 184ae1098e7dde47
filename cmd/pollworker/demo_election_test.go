package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// electionCommandRe finds the example command line the demo prints.
var electionCommandRe = regexp.MustCompile(`go run \./examples/election --redis (127\.0\.0\.1:\d+)`)

// TestElectionExampleOnDemoRedis runs the demo in-process, reads the
// command line it prints, and runs the leader-election example (built from
// examples/election) against the demo's embedded Redis as a second process:
// once to the end, once interrupted right after the first election. Both
// exit 0, and the demo still ends with its one-poller-at-a-time check
// passing.
func TestElectionExampleOnDemoRedis(t *testing.T) {
	example := filepath.Join(t.TempDir(), "election")
	out, err := exec.Command("go", "build", "-o", example, "../../examples/election").CombinedOutput()
	require.NoError(t, err, "go build examples/election: %s", out)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	demoCtx, stopDemo := context.WithCancel(ctx)
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(demoCtx, []string{"pollworker", "demo", "--duration", "90s", "--plain"}, &stdout, &stderr, nil)
	}()
	t.Cleanup(func() { stopDemo(); <-code })

	var addr string
	require.Eventually(t, func() bool {
		m := electionCommandRe.FindStringSubmatch(stdout.String())
		if m == nil {
			return false
		}
		addr = m[1]
		return true
	}, 30*time.Second, 10*time.Millisecond, "the demo prints the example's command line:\n%s", stdout.String())

	// To the end.
	full := exec.CommandContext(ctx, example, "--redis", addr)
	var fullOut syncBuffer
	full.Stdout, full.Stderr = &fullOut, &fullOut
	require.NoError(t, full.Run(), fullOut.String())
	t.Logf("example against the demo's Redis %s:\n%s", addr, fullOut.String())
	for _, want := range []string{"Redis at redis://" + addr, "leader: ", "handover: ", "nightly job ran 1 time(s) among 3 replicas", "stopped"} {
		require.Contains(t, fullOut.String(), want)
	}

	// Interrupted once elected: a clean stop, exit status 0.
	again := exec.CommandContext(ctx, example, "--redis", "redis://"+addr)
	var againOut syncBuffer
	again.Stdout, again.Stderr = &againOut, &againOut
	require.NoError(t, again.Start())
	exited := make(chan error, 1)
	go func() { exited <- again.Wait() }()
	require.Eventually(t, func() bool { return strings.Contains(againOut.String(), "leader: ") }, 30*time.Second, 5*time.Millisecond, againOut.String())
	require.NoError(t, again.Process.Signal(os.Interrupt))
	select {
	case err := <-exited:
		require.NoError(t, err, againOut.String())
	case <-ctx.Done():
		t.Fatalf("the example did not stop after SIGINT:\n%s", againOut.String())
	}
	require.Contains(t, againOut.String(), "interrupted; stopped")
	require.Regexp(t, `fencing token [4-9]\d*|fencing token \d{2,}`, againOut.String(), "tokens go on from the first run")

	// The demo, sharing its Redis with the example, ends cleanly.
	stopDemo()
	c := <-code
	code <- c // for the cleanup
	require.Equal(t, exitOK, c, stdout.String()+stderr.String())
	require.Contains(t, stdout.String(), "OK: every session was polled by one worker at a time")
	require.Empty(t, stderr.String())
}
