package nodes

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

// These tests run against a real redis-server, whose TIME and TTLs follow
// the wall clock, with short TTLs.

const realTTL = 200 * time.Millisecond

func TestRealHeartbeatMembersExpiry(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	a := newRegistry(t, c, "a", realTTL)
	b := newRegistry(t, c, "b", realTTL)
	heartbeat(t, a, b)

	m := members(t, a)
	require.Equal(t, []string{"a", "b"}, m.Nodes)
	d, ok := m.NextExpiry()
	require.True(t, ok)
	require.LessOrEqual(t, d, realTTL+time.Millisecond)
	require.Positive(t, d)
	v := m.Version

	infos, err := a.Get(ctx, "a", "b")
	require.NoError(t, err)
	require.Equal(t, []Info{a.Info(), b.Info()}, infos)

	// Only b keeps heartbeating: a drops out of the index and its Info expires.
	require.Eventually(t, func() bool {
		if b.Heartbeat(ctx) != nil {
			return false
		}
		m, err := b.Members(ctx)
		return err == nil && !m.Contains("a") && m.Contains("b")
	}, 5*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		infos, err := b.Get(ctx, "a")
		return err == nil && len(infos) == 0
	}, 5*time.Second, 20*time.Millisecond)

	heartbeat(t, b)
	m = members(t, a)
	require.Equal(t, []string{"b"}, m.Nodes)
	require.Greater(t, m.Version, v)
}

func TestRealLeave(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	a := newRegistry(t, c, "a", time.Minute)
	b := newRegistry(t, c, "b", time.Minute)
	heartbeat(t, a, b)
	require.NoError(t, b.Leave(ctx))
	require.Equal(t, []string{"a"}, members(t, a).Nodes)
	require.Equal(t, int64(0), c.Exists(ctx, testKeys.Node("b")).Val())
}

func TestRealNoScript(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	a := newRegistry(t, c, "a", time.Minute)
	heartbeat(t, a)
	require.Equal(t, []string{"a"}, members(t, a).Nodes)

	// Members falls back to EVAL after the script cache is flushed.
	require.NoError(t, c.ScriptFlush(ctx).Err())
	require.Equal(t, []string{"a"}, members(t, a).Nodes)

	// So does the pipelined heartbeat, which loads the script again.
	require.NoError(t, c.ScriptFlush(ctx).Err())
	heartbeat(t, a)
	exists, err := c.ScriptExists(ctx, heartbeatScript.Hash()).Result()
	require.NoError(t, err)
	require.Equal(t, []bool{true}, exists)
}

func TestRealRestart(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client(t)
	a := newRegistry(t, c, "a", time.Minute)
	heartbeat(t, a)
	s.Restart() // no persistence: the index is gone, and so is the script cache
	require.Empty(t, members(t, a).Nodes)
	require.Eventually(t, func() bool { return a.Heartbeat(context.Background()) == nil }, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{"a"}, members(t, a).Nodes)
}

func TestRealPrefixesIsolate(t *testing.T) {
	c := redistest.Start(t).Client(t)
	x, err := New(Config{Client: c, ID: "a", Keys: keyspace.Space{Prefix: "x"}})
	require.NoError(t, err)
	y, err := New(Config{Client: c, ID: "b", Keys: keyspace.Space{Prefix: "y"}})
	require.NoError(t, err)
	heartbeat(t, x, y)
	require.Equal(t, []string{"a"}, members(t, x).Nodes)
	require.Equal(t, []string{"b"}, members(t, y).Nodes)
}

// TestRealHeartbeatUnderMemoryPressure (issue 22 item 10): over maxmemory
// with noeviction, a member's heartbeat still moves its expiry, writing
// nothing new (PEXPIRE of its Info key, a new score for its own entry), so
// its peers do not see it leave, even when it has a new weight to write;
// OverMaxmemory says so. A worker that was not a member cannot join (its
// claim allocates a key) and the error says OOM.
func TestRealHeartbeatUnderMemoryPressure(t *testing.T) {
	c := redistest.Start(t, "--maxmemory-policy", "noeviction").Client(t)
	ctx := context.Background()
	a := newRegistry(t, c, "a", time.Minute)
	heartbeat(t, a)
	require.False(t, a.OverMaxmemory())
	before := members(t, a)
	infoBefore := a.Info()

	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
	require.ErrorContains(t, c.Set(ctx, "probe", "x", 0).Err(), "OOM")

	// The index stores whole milliseconds: wait for the server clock to
	// move, so that the renewed expiry is strictly later.
	require.Eventually(t, func() bool {
		now, err := c.Time(ctx).Result()
		return err == nil && now.UnixMilli() > before.ServerTimeMs
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, a.SetWeight(2)) // a new Info to write: refused, the old one renewed
	require.NoError(t, a.Heartbeat(ctx), "a member's heartbeat passes over maxmemory")
	require.True(t, a.OverMaxmemory())
	after := members(t, a)
	require.Equal(t, []string{"a"}, after.Nodes)
	require.Equal(t, before.Version, after.Version, "no membership change")
	require.Greater(t, after.ExpiryMs[0], before.ExpiryMs[0], "the heartbeat moved a's expiry")
	pttl, err := c.PTTL(ctx, keyspace.Space{}.Node("a")).Result()
	require.NoError(t, err)
	require.Greater(t, pttl, time.Minute-5*time.Second, "the heartbeat renewed a's Info key")
	infos, err := a.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []Info{infoBefore}, infos, "the Info last written stays until Redis has room")

	b := newRegistry(t, c, "b", time.Minute)
	require.ErrorContains(t, b.Heartbeat(ctx), "OOM", "a new worker's claim allocates: refused while Redis is full")
	require.True(t, b.OverMaxmemory())
	require.Equal(t, []string{"a"}, members(t, a).Nodes)

	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "0").Err())
	heartbeat(t, a, b)
	require.False(t, a.OverMaxmemory())
	require.Equal(t, []string{"a", "b"}, members(t, a).Nodes)
	infos, err = a.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []Info{a.Info()}, infos, "the new weight is written once Redis has room")
	require.Equal(t, 2.0, infos[0].Weight)
}
