package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

// TestSentinelFailover runs a worker through Sentinel (one master, one
// replica, one sentinel), kills the master, and checks that the worker
// polls again under a lease on the promoted replica. What a failover can
// do to fencing is in the README: with asynchronous replication the last
// counter increment may be lost, so the test logs the tokens it saw.
func TestSentinelFailover(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	sentinel := redistest.StartSentinel(t, "pwmaster", master)
	url := "redis://" + sentinel.Addr()
	flags := []string{"--redis-url", url, "--redis-sentinel-master", "pwmaster"}

	// The sentinel's address without --redis-sentinel-master is refused
	// (exit 2) naming the flag: run retried it for ever, sessions printed
	// "unknown command 'get'".
	const wantPlain = "--redis-url names a sentinel, not a Redis server: add --redis-sentinel-master NAME"
	code, errOut, _ := runUntilExit(t, "--redis-url", url, "--id", "plain")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, lastLine(errOut), wantPlain)
	// Every command says so, whichever command the sentinel refused
	// first (GET, GETRANGE, a script: status said "this Redis does not
	// know a command pollworker needs").
	for _, args := range [][]string{
		{"sessions", "--redis-url", url, "list"},
		{"sessions", "--redis-url", url, "add", "--id", "p1", "--url", "http://127.0.0.1:1/", "--interval", "1s"},
		{"status", "--redis-url", url},
		{"check", "--redis-url", url},
		{"explain", "--redis-url", url, "p1"},
	} {
		r := runApp(t, args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, wantPlain, args)
	}

	// A master name no sentinel monitors is refused (exit 2) naming the
	// flag: run waited for ever, sessions said the sentinels were
	// unreachable.
	const wantName = `no sentinel monitors a master named "nope" (--redis-sentinel-master)`
	code, errOut, _ = runUntilExit(t, "--redis-url", url, "--redis-sentinel-master", "nope", "--id", "badname")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, lastLine(errOut), wantName)
	// sessions list, which reads its buckets in parallel until its
	// deadline, said "context deadline exceeded" (exit 1).
	for _, cmd := range [][]string{{"status"}, {"sessions", "list"}, {"sessions", "export"}} {
		r := runApp(t, append(cmd, "--redis-url", url, "--redis-sentinel-master", "nope", "--timeout", "2s")...)
		require.Equal(t, exitUsage, r.code, "%v: %s", cmd, r.stderr)
		require.Contains(t, r.stderr, wantName, cmd)
	}

	r := runApp(t, append(append([]string{"sessions"}, flags...), "add", "--id", "f1", "--url", "http://127.0.0.1:1/", "--interval", "100ms")...)
	require.Equal(t, exitOK, r.code, r.stderr)

	ctx, cancel := context.WithCancel(ctxT(t))
	var stdout, stderr syncBuffer
	exited := make(chan struct{})
	args := append(append([]string{"pollworker", "run", "--id", "sw"}, flags...), fastTimings...)
	go func() { run(ctx, args, &stdout, &stderr, nil); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })

	leaseOn := func(s *redistest.Server) string {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		defer c.Close()
		v, _ := c.Get(context.Background(), "poll:lease:{f1}").Result()
		// the slot's token high-water mark: the fencing record holds a
		// token only from the session's first release on
		tok, _ := c.Get(context.Background(), keyspace.Space{}.EpochTokens(0)).Result()
		if !strings.HasPrefix(v, "sw#") {
			return ""
		}
		return tok
	}
	var before string
	require.Eventually(t, func() bool { before = leaseOn(master); return before != "" }, 15*time.Second, 20*time.Millisecond, stderr.String())
	// Let the replica catch up, as a healthy setup would.
	require.Eventually(t, func() bool { return leaseOn(replica) != "" }, 10*time.Second, 20*time.Millisecond)

	master.Stop()
	var after string
	require.Eventually(t, func() bool { after = leaseOn(replica); return after != "" && isMaster(replica) }, 30*time.Second, 50*time.Millisecond, stderr.String())
	t.Logf("token high-water mark before failover %s, on the promoted replica %s", before, after)
	b, _ := strconv.Atoi(before)
	a, _ := strconv.Atoi(after)
	require.GreaterOrEqual(t, a, b, "the replica had replicated the mark before the failover")
}

func isMaster(s *redistest.Server) bool {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(context.Background(), "replication").Result()
	return err == nil && strings.Contains(info, "role:master")
}
