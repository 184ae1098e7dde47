package nodes

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

func TestNewValidates(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	tests := []struct {
		name string
		give Config
		want string // substring of the error; empty for success
	}{
		{name: "ok", give: Config{Client: c, ID: "a", TTL: time.Second}},
		{name: "defaults", give: Config{Client: c}},
		{name: "no client", give: Config{ID: "a"}, want: "Client is required"},
		{name: "bad id", give: Config{Client: c, ID: "a b"}, want: "ID: keyspace: invalid id"},
		{name: "glob id", give: Config{Client: c, ID: "a*"}, want: "ID: keyspace: invalid id"},
		{name: "negative ttl", give: Config{Client: c, ID: "a", TTL: -time.Second}, want: "must be at least 1ms"},
		{name: "sub-ms ttl", give: Config{Client: c, ID: "a", TTL: time.Microsecond}, want: "must be at least 1ms"},
		{name: "bad prefix", give: Config{Client: c, ID: "a", Keys: keyspace.Space{Prefix: "x y"}}, want: "Keys: key prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.give)
			if tt.want != "" {
				require.ErrorIs(t, err, ErrInvalidConfig)
				require.ErrorContains(t, err, tt.want)
				return
			}
			require.NoError(t, err)
			require.NoError(t, keyspace.ValidateID(r.ID()))
			if tt.give.TTL == 0 {
				require.Equal(t, DefaultTTL, r.TTL())
			}
		})
	}
}

func TestNewTruncatesTTL(t *testing.T) {
	_, c := newMini(t)
	r := newRegistry(t, c, "a", 1500*time.Microsecond)
	require.Equal(t, time.Millisecond, r.TTL())
}

func TestHeartbeatThenMembersContainsSelf(t *testing.T) {
	mr, c := newMini(t)
	r := newRegistry(t, c, "a", 10*time.Second)
	heartbeat(t, r)

	m := members(t, r)
	require.Equal(t, []string{"a"}, m.Nodes)
	require.True(t, m.Contains("a"))
	require.False(t, m.Contains("b"))
	require.Equal(t, t0.UnixMilli(), m.ServerTimeMs)
	require.Equal(t, []int64{t0.UnixMilli() + 10_000}, m.ExpiryMs)
	require.Equal(t, uint64(1), m.Version)

	// The Info key holds the JSON Info with the TTL.
	raw, err := mr.Get(testKeys.Node("a"))
	require.NoError(t, err)
	var info Info
	require.NoError(t, json.Unmarshal([]byte(raw), &info))
	require.Equal(t, r.Info(), info)
	require.Equal(t, "test", info.Version)
	require.Equal(t, 10*time.Second, mr.TTL(testKeys.Node("a")))
	for _, field := range []string{`"id":"a"`, `"host":`, `"pid":`, `"started":`, `"version":"test"`} {
		require.Contains(t, raw, field)
	}
}

func TestTwoRegistriesSeeEachOther(t *testing.T) {
	_, c := newMini(t)
	a := newRegistry(t, c, "a", 10*time.Second)
	b := newRegistry(t, c, "b", 10*time.Second)
	heartbeat(t, a, b)
	require.Equal(t, []string{"a", "b"}, members(t, a).Nodes)
	require.Equal(t, []string{"a", "b"}, members(t, b).Nodes)
}

func TestMembersSorted(t *testing.T) {
	mr, c := newMini(t)
	ids := []string{"d", "b", "c", "a"}
	for i, id := range ids {
		mr.SetTime(t0.Add(time.Duration(i) * time.Millisecond))
		heartbeat(t, newRegistry(t, c, id, 10*time.Second))
	}
	m := members(t, newRegistry(t, c, "x", time.Second))
	require.Equal(t, []string{"a", "b", "c", "d"}, m.Nodes)
	base := t0.UnixMilli() + 10_000
	require.Equal(t, []int64{base + 3, base + 1, base + 2, base}, m.ExpiryMs)
}

func TestVersionChangesOnlyWithSet(t *testing.T) {
	mr, c := newMini(t)
	ctx := context.Background()
	a := newRegistry(t, c, "a", 10*time.Second)
	b := newRegistry(t, c, "b", 10*time.Second)

	require.Equal(t, uint64(1), members(t, a).Version, "first observation, even of nobody")
	require.Equal(t, uint64(1), members(t, a).Version)

	heartbeat(t, a)
	v := members(t, a).Version
	require.Equal(t, uint64(2), v)

	mr.SetTime(t0.Add(time.Second))
	heartbeat(t, a) // expiry moves, set does not
	m := members(t, a)
	require.Equal(t, v, m.Version)
	require.Equal(t, []int64{t0.UnixMilli() + 11_000}, m.ExpiryMs)

	heartbeat(t, b) // join
	m = members(t, a)
	require.Greater(t, m.Version, v)
	require.Equal(t, []string{"a", "b"}, m.Nodes)
	v = m.Version

	require.NoError(t, b.Leave(ctx)) // leave
	m = members(t, a)
	require.Greater(t, m.Version, v)
	require.Equal(t, []string{"a"}, m.Nodes)
}

func TestLeave(t *testing.T) {
	mr, c := newMini(t)
	ctx := context.Background()
	a := newRegistry(t, c, "a", 10*time.Second)
	b := newRegistry(t, c, "b", 10*time.Second)
	heartbeat(t, a, b)

	require.NoError(t, b.Leave(ctx))
	require.Equal(t, []string{"a"}, members(t, a).Nodes)
	require.False(t, mr.Exists(testKeys.Node("b")))
	require.True(t, mr.Exists(testKeys.Node("a")))

	require.NoError(t, b.Leave(ctx), "leaving twice is fine")
}

func TestExpiredMembersPruned(t *testing.T) {
	mr, c := newMini(t)
	ctx := context.Background()
	a := newRegistry(t, c, "a", 10*time.Second)
	b := newRegistry(t, c, "b", 10*time.Second)
	heartbeat(t, a)
	mr.SetTime(t0.Add(4 * time.Second))
	heartbeat(t, b)

	m := members(t, b)
	d, ok := m.NextExpiry()
	require.True(t, ok)
	require.Equal(t, 6*time.Second+time.Millisecond, d, "a is next, 6s from now")

	// At a's expiry it still counts; one millisecond later it is gone.
	// (miniredis expires a's heartbeat key at its expiry, Redis one
	// millisecond later; a member counts only with its key: the key is
	// made to outlive the entry by that millisecond, so that the index's
	// boundary decides here.)
	mr.SetTTL(testKeys.Node("a"), 6*time.Second+time.Millisecond)
	mr.SetTime(t0.Add(10 * time.Second))
	require.Equal(t, []string{"a", "b"}, members(t, b).Nodes)
	mr.SetTime(t0.Add(10*time.Second + time.Millisecond))
	m = members(t, b)
	require.Equal(t, []string{"b"}, m.Nodes)
	d, ok = m.NextExpiry()
	require.True(t, ok)
	require.Equal(t, 4*time.Second, d)

	// a's Info expired with it.
	infos, err := b.Get(ctx, "a", "b")
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.Equal(t, "b", infos[0].ID)

	// Members writes nothing (a replica or a read-only user can read
	// them); a heartbeat prunes the expired entries.
	require.Equal(t, []string{"a", "b"}, mustZMembers(t, mr.ZMembers, testKeys.NodeIndex()))
	mr.SetTime(t0.Add(20 * time.Second))
	heartbeat(t, a)
	require.Equal(t, []string{"a"}, mustZMembers(t, mr.ZMembers, testKeys.NodeIndex()))
}

func mustZMembers(t *testing.T, f func(string) ([]string, error), key string) []string {
	t.Helper()
	ms, err := f(key)
	require.NoError(t, err)
	return ms
}

func TestGet(t *testing.T) {
	mr, c := newMini(t)
	ctx := context.Background()
	a := newRegistry(t, c, "a", 10*time.Second)
	b := newRegistry(t, c, "b", 10*time.Second)
	heartbeat(t, a, b)
	require.NoError(t, mr.Set(testKeys.Node("bad"), "{not json"))
	mr.HSet(testKeys.Node("hash"), "x", "y") // one worker's key of the wrong type: the others are still read

	infos, err := a.Get(ctx, "b", "missing", "bad", "hash", "a")
	require.NoError(t, err)
	require.Equal(t, []Info{b.Info(), a.Info()}, infos)

	infos, err = a.Get(ctx)
	require.NoError(t, err)
	require.Empty(t, infos)

	mr.SetError("LOADING Redis is loading")
	_, err = a.Get(ctx, "a")
	require.ErrorContains(t, err, "get node a")
}

// TestWrongTypeErrorsNameTheKey: a heartbeat or a membership read that
// meets a key of the wrong type says which (a script's WRONGTYPE does
// not).
func TestWrongTypeErrorsNameTheKey(t *testing.T) {
	mr, c := newMini(t)
	ctx := context.Background()
	a := newRegistry(t, c, "a", 10*time.Second)
	mr.HSet(testKeys.Node("a"), "x", "y")
	require.ErrorContains(t, a.Heartbeat(ctx), "key "+testKeys.Node("a")+" has the wrong type")
	mr.Del(testKeys.Node("a"))
	mr.HSet(testKeys.NodeIndex(), "x", "y")
	require.ErrorContains(t, a.Heartbeat(ctx), "key "+testKeys.NodeIndex()+" has the wrong type")
	_, err := a.Members(ctx)
	require.ErrorContains(t, err, "key "+testKeys.NodeIndex()+" has the wrong type")
	mr.Del(testKeys.NodeIndex())
	mr.HSet(testKeys.Cordoned(), "x", "y")
	_, err = a.Members(ctx)
	require.ErrorContains(t, err, "key "+testKeys.Cordoned()+" has the wrong type")
}

func TestErrorsWrapped(t *testing.T) {
	mr, c := newMini(t)
	ctx := context.Background()
	a := newRegistry(t, c, "a", 10*time.Second)
	mr.SetError("LOADING Redis is loading")
	assert.ErrorContains(t, a.Heartbeat(ctx), "heartbeat a")
	_, err := a.Members(ctx)
	assert.ErrorContains(t, err, "members")
	assert.ErrorContains(t, a.Leave(ctx), "leave a")
}

func TestNoScriptMiniredis(t *testing.T) {
	_, c := newMini(t)
	ctx := context.Background()
	a := newRegistry(t, c, "a", 10*time.Second)
	require.NoError(t, c.ScriptFlush(ctx).Err())
	heartbeat(t, a)
	require.NoError(t, c.ScriptFlush(ctx).Err())
	require.Equal(t, []string{"a"}, members(t, a).Nodes)
}

func TestParseMembersRejectsBadReplies(t *testing.T) {
	tests := []struct {
		name string
		give []any
	}{
		{name: "empty", give: nil},
		{name: "even", give: []any{int64(1), "a"}},
		{name: "time not number", give: []any{[]any{}}},
		{name: "id not string", give: []any{int64(1), int64(2), int64(3)}},
		{name: "expiry not number", give: []any{int64(1), "a", "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseMembers(tt.give)
			require.ErrorIs(t, err, ErrUnexpectedReply)
		})
	}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name       string
		before     []string
		after      []string
		wantJoined []string
		wantLeft   []string
	}{
		{name: "empty"},
		{name: "first", after: []string{"a", "b"}, wantJoined: []string{"a", "b"}},
		{name: "all left", before: []string{"a", "b"}, wantLeft: []string{"a", "b"}},
		{name: "mixed", before: []string{"a", "c", "e"}, after: []string{"b", "c", "d"},
			wantJoined: []string{"b", "d"}, wantLeft: []string{"a", "e"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			joined, left := diff(tt.before, tt.after)
			require.Equal(t, tt.wantJoined, joined)
			require.Equal(t, tt.wantLeft, left)
		})
	}
}

func TestReaderReadsWithoutJoining(t *testing.T) {
	mr, c := newMini(t)
	ctx := context.Background()
	reg, err := New(Config{Client: c, ID: "w1"})
	require.NoError(t, err)
	require.NoError(t, reg.Heartbeat(ctx))
	before := mr.Keys()

	r, err := NewReader(c, keyspace.Space{}, nil)
	require.NoError(t, err)
	m, err := r.Members(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"w1"}, m.Nodes)
	require.Zero(t, m.Version, "only a Registry numbers its observations")
	infos, err := r.Get(ctx, "w1", "gone")
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.Equal(t, reg.Incarnation(), infos[0].Incarnation)
	require.Equal(t, before, mr.Keys(), "a reader writes nothing")

	_, err = NewReader(nil, keyspace.Space{}, nil)
	require.ErrorIs(t, err, ErrInvalidConfig)
}
