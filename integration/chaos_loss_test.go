package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

// The chaos faults of issue 11 that need more than one line: sessions
// restored from a file after FLUSHALL, a Sentinel failover to a replica
// that missed the last acquisitions, and fencing counters deleted under
// held leases. chaos_test.go lists them with the other faults.

// quickFailoverClient is a client through the setup's sentinel that honours
// context deadlines and never retries, for the recorder's fence lookups.
func quickFailoverClient(t *testing.T, s *sentinelSetup) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            sentinelMaster,
		SentinelAddrs:         []string{s.sentinel.Addr()},
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sessionsCLI runs `pollworker sessions <args>` against the cluster's
// Redis (through Sentinel when the cluster has one) and returns its
// standard output; a failure fails the test with its standard error.
func (c *cluster) sessionsCLI(args ...string) string {
	c.t.Helper()
	full := []string{"sessions", "--redis-url", c.redisURL()}
	if c.sentinel != nil {
		full = append(full, "--redis-sentinel-master", sentinelMaster)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append(full, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(c.t, cmd.Run(), "pollworker %s: %s", strings.Join(args, " "), stderr.String())
	return stdout.String()
}

// exportSessions writes `pollworker sessions export` to a file, the
// operator's copy of the sessions, and returns its path.
func (c *cluster) exportSessions() string {
	c.t.Helper()
	path := filepath.Join(c.t.TempDir(), "sessions.yaml")
	require.NoError(c.t, os.WriteFile(path, []byte(c.sessionsCLI("export")), 0o600))
	return path
}

// applySessions puts the sessions of file back with `pollworker sessions
// apply -f`.
func (c *cluster) applySessions(file string) {
	c.t.Helper()
	c.logf("sessions apply: %s", strings.TrimSpace(c.sessionsCLI("apply", "-f", file)))
}

// failoverLaggingReplica promotes a replica that missed the last
// acquisitions, as TestSentinelFailoverFencing does with the script alone,
// here under running workers that connect through Sentinel: the replica is
// in sync (WAIT 1), then paused (SIGSTOP) and its link killed on the
// master; a worker drains (the others take its leases) and one joins (the
// rebalance hands leases over), so that the master grants acquisitions the
// replica never sees; then the master is killed (SIGKILL), the replica
// resumed, and Sentinel promotes it. It returns when the sentinel names the
// replica as master, and sets c.failover to the time from the kill.
func (c *cluster) failoverLaggingReplica() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := c.sentinel
	m := s.master.Client(c.t)
	require.EqualValues(c.t, 1, m.Wait(ctx, 1, time.Second).Val(), "WAIT 1: the replica is in sync before the cut")

	pid := s.replica.Pid()
	require.NotZero(c.t, pid)
	require.NoError(c.t, syscall.Kill(pid, syscall.SIGSTOP))
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	c.t.Cleanup(resume)
	require.NoError(c.t, m.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err())
	waitFor(c.t, 5*time.Second, "master sees no replica", func() bool {
		return strings.Contains(info(s.master), "connected_slaves:0")
	})
	cut := time.Now()
	seen := c.tokens()

	w := c.victim()
	w.signal(c.t, syscall.SIGTERM)
	delete(c.workers, w.id) // exits by itself; t.Cleanup reaps it
	joined := c.start("", false)
	c.logf("replica paused and cut off; drain %s, join %s", w.id, joined)
	// Wait for acquisitions only the master has: polls under tokens not
	// seen before the cut. A third of the sessions, or what came in 3s.
	fresh := 0
	assertEventually(3*time.Second, func() bool {
		fresh = c.newTokens(cut, seen)
		return fresh >= chaosSessions/3
	})
	require.Positive(c.t, fresh, "no acquisition while the replica was cut off")

	killed := time.Now()
	s.master.Stop() // SIGKILL
	resume()
	c.logf("killed the master %v after the cut: %d sessions polled under acquisitions the replica missed", killed.Sub(cut).Round(time.Millisecond), fresh)
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.sentinel.Addr(), MaxRetries: -1})
	defer sc.Close()
	want := strconv.Itoa(s.replica.Port)
	waitFor(c.t, 45*time.Second, "the sentinel names the replica master", func() bool {
		qctx, qcancel := context.WithTimeout(ctx, time.Second)
		defer qcancel()
		addr, err := sc.GetMasterAddrByName(qctx, sentinelMaster).Result()
		return err == nil && len(addr) == 2 && addr[1] == want
	})
	c.failover = time.Since(killed)
	c.rds = s.replica
	c.logf("failover: the sentinel names the replica master %v after the kill", c.failover.Round(time.Millisecond))
}

// tokens returns, per session, the tokens of the polls recorded so far.
func (c *cluster) tokens() map[string]map[int64]bool {
	out := map[string]map[int64]bool{}
	for _, p := range c.rec.snapshot() {
		if out[p.Session] == nil {
			out[p.Session] = map[int64]bool{}
		}
		out[p.Session][p.Token] = true
	}
	return out
}

// newTokens counts the sessions polled since from under a token not in
// seen: acquired since.
func (c *cluster) newTokens(from time.Time, seen map[string]map[int64]bool) int {
	got := map[string]bool{}
	for _, p := range c.rec.snapshot() {
		if !p.Start.Before(from) && !seen[p.Session][p.Token] {
			got[p.Session] = true
		}
	}
	return len(got)
}

// evictCounters deletes the fencing record of every session under its
// held lease and the slot's token high-water mark, as an eviction would,
// then hands leases over: a worker
// drains (its leases are released and taken at once) or is killed (they
// expire after a TTL), one joins (the rebalance hands some over), and a
// moment later the counters are deleted again, under the leases just
// acquired. The loss marker is untouched, so no quarantine starts: tokens
// must keep increasing by the clock alone.
func (c *cluster) evictCounters() {
	c.t.Helper()
	ctx := context.Background()
	del := func() {
		keys := make([]string, 0, len(c.active))
		for id := range c.active {
			keys = append(keys, keyspace.Space{}.Fencing(id))
		}
		keys = append(keys, keyspace.Space{}.EpochTokens(0)) // the token high-water mark too
		n, err := c.admin.Del(ctx, keys...).Result()
		require.NoError(c.t, err)
		c.logf("DEL of %d fencing records and the token high-water mark under held leases", n)
	}
	del()
	w := c.victim()
	if c.rng.IntN(2) == 0 {
		c.logf("drain %s", w.id)
		w.signal(c.t, syscall.SIGTERM)
	} else {
		c.logf("kill -9 %s", w.id)
		w.signal(c.t, syscall.SIGKILL)
		_ = w.wait(c.t, 10*time.Second)
	}
	delete(c.workers, w.id)
	c.logf("join %s", c.start("", false))
	hold(time.Duration(200+c.rng.IntN(600)) * time.Millisecond)
	del()
}
