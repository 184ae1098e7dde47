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
