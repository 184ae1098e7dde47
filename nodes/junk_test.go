package nodes

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

// roundTrips counts the commands and pipelines a client sends.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// liveAB starts a redis-server on which workers a and b heartbeat, and
// returns a client and a's Registry.
func liveAB(t *testing.T) (*redis.Client, *Registry) {
	t.Helper()
	c := redistest.Start(t).Client(t)
	a := newRegistry(t, c, "a", time.Minute)
	heartbeat(t, a, newRegistry(t, c, "b", time.Minute))
	return c, a
}

// TestRealJunkMembersAreNotLive: unexpired entries of the node index that
// are not valid worker ids, or have no heartbeat key, are not members (the
// old reader listed every one as live, so they took sessions); they are in
// Junk, a cordon refuses them, ForgetJunk removes the invalid ones and
// Forget the valid one, and reading costs two round trips however many
// entries there are.
func TestRealJunkMembersAreNotLive(t *testing.T) {
	ctx := context.Background()
	c, a := liveAB(t)
	long := strings.Repeat("x", 5000)
	junk := []string{"ghost", "bad id with spaces", "", long, "ünï©ødé"}
	until := float64(time.Now().Add(time.Hour).UnixMilli())
	for _, j := range junk {
		require.NoError(t, c.ZAdd(ctx, testKeys.NodeIndex(), redis.Z{Score: until, Member: j}).Err())
	}
	for i := range 50 { // valid ids without a heartbeat: still one pipeline
		require.NoError(t, c.ZAdd(ctx, testKeys.NodeIndex(), redis.Z{Score: until, Member: "g" + strings.Repeat("h", i)}).Err())
	}

	members(t, a) // loads the script
	hook := &roundTrips{}
	c.AddHook(hook)
	m := members(t, a)
	require.EqualValues(t, 2, hook.n.Load(), "one script call with SMEMBERS, one pipeline of GETs")
	require.Equal(t, []string{"a", "b"}, m.Nodes)
	require.Len(t, m.ExpiryMs, 2)
	require.Len(t, m.Junk, len(junk)+50)
	problems := map[string]string{}
	for _, j := range m.Junk {
		problems[j.Member] = j.Problem
	}
	require.Equal(t, "no heartbeat key poll:node:ghost", problems["ghost"])
	require.Equal(t, "not a valid worker id: empty", problems[""])
	require.Equal(t, "not a valid worker id: 5000 bytes, at most 200", problems[long])
	require.Contains(t, problems["bad id with spaces"], "not a valid worker id: ")
	require.Contains(t, problems["ünï©ødé"], "not a valid worker id: ")

	require.ErrorIs(t, Cordon(ctx, c, testKeys, "ghost"), ErrNotLive)

	require.ErrorIs(t, ForgetJunk(ctx, c, testKeys, "ghost"), ErrNotJunk, "a valid id: Forget")
	require.ErrorIs(t, ForgetJunk(ctx, c, testKeys, "not there"), ErrNotJunk)
	for _, j := range junk[1:] {
		require.NoError(t, ForgetJunk(ctx, c, testKeys, j), "%.20q", j)
	}
	require.NoError(t, Forget(ctx, c, testKeys, "ghost"))
	require.ErrorIs(t, Forget(ctx, c, testKeys, "ghost"), ErrUnknown, "nothing left of it: a typo says so")
	m = members(t, a)
	require.Equal(t, []string{"a", "b"}, m.Nodes)
	require.Len(t, m.Junk, 50)
	n, err := c.Exists(ctx, testKeys.Node("a"), testKeys.Node("b")).Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "nothing of the live workers touched")
}

// TestRealLeftWorkerIsNotLive: a worker whose heartbeat key is gone (it
// left, or the key expired) is not live even while its index entry has
// not expired yet.
func TestRealLeftWorkerIsNotLive(t *testing.T) {
	ctx := context.Background()
	c, a := liveAB(t)
	require.NoError(t, c.Del(ctx, testKeys.Node("b")).Err())
	m := members(t, a)
	require.Equal(t, []string{"a"}, m.Nodes)
	require.Equal(t, []Junk{{Member: "b", Problem: "no heartbeat key poll:node:b"}}, m.Junk)
}

// TestRealHeartbeatKeyOfNoWorkerIsJunk: an entry whose heartbeat key
// exists but holds no info of its own (garbage, the wrong type, "{}",
// another worker's info) took a quarter of the sessions of a fleet of
// three and never polled them (their polls came only from the orphan
// watch); it is junk like an entry without a key.
func TestRealHeartbeatKeyOfNoWorkerIsJunk(t *testing.T) {
	ctx := context.Background()
	c, a := liveAB(t)
	until := float64(time.Now().Add(time.Hour).UnixMilli())
	for _, g := range []string{"garbage", "hash", "empty", "other"} {
		require.NoError(t, c.ZAdd(ctx, testKeys.NodeIndex(), redis.Z{Score: until, Member: g}).Err())
	}
	require.NoError(t, c.Set(ctx, testKeys.Node("garbage"), "{not json", 0).Err())
	require.NoError(t, c.HSet(ctx, testKeys.Node("hash"), "a", "b").Err())
	require.NoError(t, c.Set(ctx, testKeys.Node("empty"), "{}", 0).Err())
	info, err := c.Get(ctx, testKeys.Node("a")).Result()
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, testKeys.Node("other"), info, 0).Err())

	m := members(t, a)
	require.Equal(t, []string{"a", "b"}, m.Nodes)
	require.Equal(t, []Junk{
		{Member: "empty", Problem: `heartbeat key poll:node:empty holds the info of "", not of this worker`},
		{Member: "garbage", Problem: "heartbeat key poll:node:garbage holds no worker info (malformed JSON)"},
		{Member: "hash", Problem: "heartbeat key poll:node:hash is not a string"},
		{Member: "other", Problem: `heartbeat key poll:node:other holds the info of "a", not of this worker`},
	}, m.Junk)
}
