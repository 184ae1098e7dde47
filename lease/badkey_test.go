package lease

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pollworker/pollworker/keyspace"
)

// plantBad makes session's key of role bad: problem "" makes the lease
// key a hash or the fencing record a string; otherwise value is the token
// in the fencing record, or (roleOldFence) the fencing counter of the
// layout before the records, with the loss marker made one of that layout
// so that the acquisitions look at it.
func (r *realEnv) plantBad(t *testing.T, role, session, value string) string {
	t.Helper()
	ctx := context.Background()
	key := newBadKey(realKeys, session, role, "").Key
	switch {
	case role == roleOldFence:
		r.upgraded(t)
		require.NoError(t, r.rdb.Set(ctx, key, value, 0).Err())
	case value != "":
		require.NoError(t, r.rdb.HSet(ctx, key, keyspace.FieldToken, value).Err())
	case role == RoleFence:
		require.NoError(t, r.rdb.Del(ctx, key).Err())
		require.NoError(t, r.rdb.Set(ctx, key, "planted by a test", 0).Err())
	default:
		require.NoError(t, r.rdb.Del(ctx, key).Err())
		require.NoError(t, r.rdb.HSet(ctx, key, "planted", "by a test").Err())
	}
	return key
}

// upgraded makes the loss marker of slot 0 one that a version before the
// fencing records wrote (this server's, no quarantine, without ":2"), as
// an upgrade in place finds it: the acquisitions look at the keys of that
// layout.
func (r *realEnv) upgraded(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	runID := infoField(r.rdb.Info(ctx, "server").Val(), "run_id")
	require.NotEmpty(t, runID)
	require.NoError(t, r.rdb.Set(ctx, realKeys.Epoch(0), runID+":0", 0).Err())
}

// observed returns a Config option that logs into the returned logs.
func observed() (*observer.ObservedLogs, func(*Config)) {
	core, logs := observer.New(zapcore.DebugLevel)
	return logs, func(c *Config) { c.Logger = zap.New(core) }
}

// TestRealBadKeyAffectsOnlyItsSession: one key of the wrong type (or a
// fencing counter that is not a safe decimal integer) in the middle of a
// batch: the other sessions of the batch are acquired, the bad one is
// reported (which key, why), logged once however often it is retried,
// listed by BadKeys and by Inspect; its key is left as it was; once the
// key is repaired by hand the session is acquired.
func TestRealBadKeyAffectsOnlyItsSession(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	tests := []struct {
		name        string
		role, value string
		problem     string
	}{
		{"lease key a hash", RoleLease, "", "wrong type hash"},
		{"fencing record a string", RoleFence, "", "wrong type string"},
		{"token not a number", RoleFence, "12abc", "not a decimal integer: 12abc"},
		{"token negative", RoleFence, "-5", "not a decimal integer: -5"},
		{"token at 2^53-1", RoleFence, "9007199254740991", "at or above 2^53-1: 9007199254740991"},
		{"token above 2^53", RoleFence, "9007199254740993", "at or above 2^53-1: 9007199254740993"},
		{"token a year ahead of the clock", RoleFence, "8000000000000000",
			"more than a year ahead of the server clock (not a token pollworker minted): 8000000000000000"},
		{"old fencing counter not a number", roleOldFence, "12abc", "not a decimal integer: 12abc"},
		{"old fencing counter above 2^53", roleOldFence, "9007199254740993", "at or above 2^53-1: 9007199254740993"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, r.rdb.FlushAll(ctx).Err())
			logs, withLogs := observed()
			m := r.manager(t, "w1", withLogs)
			key := r.plantBad(t, tt.role, "s2", tt.value)
			sessions := []string{"s1", "s2", "s3"}

			for range 3 { // retries
				res := m.Acquire(ctx, sessions)
				require.NotNil(t, res[0].Lease, "before the bad one")
				require.NotNil(t, res[2].Lease, "after the bad one")
				require.NoError(t, res[1].Err, "a bad key is not an unknown outcome")
				require.Nil(t, res[1].Lease)
				require.Equal(t, newBadKey(realKeys, "s2", tt.role, tt.problem), res[1].Bad)
				require.ErrorIs(t, res[1].Bad, ErrBadKey)
			}
			require.Equal(t, 1, logs.FilterField(zap.String("event", "bad_key")).Len(), "logged once, not per retry")
			require.Equal(t, []BadKey{*newBadKey(realKeys, "s2", tt.role, tt.problem)}, m.BadKeys())
			require.Equal(t, 2, m.Count())

			hs, err := NewReader(r.rdb, realKeys, 0).Inspect(ctx, sessions)
			require.NoError(t, err, "a bad key fails no reader")
			require.Nil(t, hs[0].Bad)
			require.Equal(t, newBadKey(realKeys, "s2", tt.role, tt.problem), hs[1].Bad)
			require.NotEmpty(t, hs[2].Owner)

			typ, err := r.rdb.Type(ctx, key).Result()
			require.NoError(t, err)
			switch {
			case tt.value == "" && tt.role == RoleLease:
				require.Equal(t, "hash", typ, "the bad key is left as it was")
			case tt.value == "":
				require.Equal(t, "string", typ, "the bad key is left as it was")
			case tt.role == roleOldFence:
				require.Equal(t, tt.value, r.rdb.Get(ctx, key).Val(), "the bad counter is left as it was")
			default:
				require.Equal(t, tt.value, r.rdb.HGet(ctx, key, keyspace.FieldToken).Val(), "the bad token is left as it was")
			}
			if tt.role != RoleLease {
				require.Zero(t, r.rdb.Exists(ctx, realKeys.Lease("s2")).Val(), "nothing of the bad session was written")
			}

			require.NoError(t, r.rdb.Del(ctx, key).Err()) // repaired by hand
			require.NotNil(t, acquireOne(t, m, "s2").Lease)
			require.Empty(t, m.BadKeys())
			require.NoError(t, m.ReleaseAll(ctx))
		})
	}
}

// TestRealReleaseLeavesBadKeys: a lease key made a hash while held is not
// ours (and the rest of the batch is released); a fencing record made a
// string is left as it is while its lease is released.
func TestRealReleaseLeavesBadKeys(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	m := r.manager(t, "w1")
	res := m.Acquire(ctx, []string{"s1", "s2", "s3"})
	lease := r.plantBad(t, RoleLease, "s2", "")
	record := r.plantBad(t, RoleFence, "s3", "")

	require.NoError(t, m.Release(ctx, res[0].Lease, res[1].Lease, res[2].Lease))
	require.Zero(t, r.rdb.Exists(ctx, realKeys.Lease("s1"), realKeys.Lease("s3")).Val(), "the others are released")
	require.Equal(t, "hash", r.rdb.Type(ctx, lease).Val())
	require.Equal(t, "string", r.rdb.Type(ctx, record).Val())
	require.Equal(t, "hash", r.rdb.Type(ctx, realKeys.Fencing("s1")).Val(), "the others' marks are left")
	released, _ := r.mark(t, "s1")
	require.Positive(t, released)
}

// TestRealBadLossMarkerIsRepaired: a loss marker of the wrong type is
// reported loudly and overwritten with a fresh quarantine (as a lost one
// is), never a failure of every acquisition: with the quarantine off the
// sessions are acquired at once, with it on they wait one quarantine.
func TestRealBadLossMarkerIsRepaired(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	marker := realKeys.Epoch(0)
	for _, quarantine := range []time.Duration{-1, time.Hour} {
		t.Run("quarantine "+quarantine.String(), func(t *testing.T) {
			require.NoError(t, r.rdb.FlushAll(ctx).Err())
			require.NoError(t, r.rdb.HSet(ctx, marker, "planted", "by a test").Err())
			logs, withLogs := observed()
			m := r.manager(t, "w1", withLogs, withQuarantine(quarantine))

			res := m.Acquire(ctx, []string{"s1", "s2"})
			for _, x := range res {
				require.NoError(t, x.Err)
				require.Nil(t, x.Bad)
				require.Equal(t, quarantine > 0, x.Quarantined)
				require.Equal(t, quarantine < 0, x.Lease != nil)
			}
			require.Equal(t, 1, m.MarkerRepairs())
			bad := logs.FilterField(zap.String("event", "bad_loss_marker")).All()
			require.Len(t, bad, 1)
			require.Equal(t, zapcore.ErrorLevel, bad[0].Level)
			require.Equal(t, "string", r.rdb.Type(ctx, marker).Val(), "repaired")

			m.Acquire(ctx, []string{"s1", "s2"})
			require.Equal(t, 1, m.MarkerRepairs(), "repaired once")
		})
	}
}

// TestRealHugeFencingCounterNeverSharesToken: a counter at or above 2^53
// (Lua's doubles are exact only below) is refused and reported, by every
// owner, so no token is minted twice or below the counter; so is one more
// than a year ahead of the server clock (a foreign write: it would run
// the tokens to 2^53-1), while one an hour ahead (a clock stepped back)
// is minted from.
func TestRealHugeFencingCounterNeverSharesToken(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	a, b := r.manager(t, "a"), r.manager(t, "b")
	require.NoError(t, r.rdb.HSet(ctx, realKeys.Fencing("s"), keyspace.FieldToken, "9007199254740993").Err())
	for range 2 { // acquire, release, acquire with two owners
		for _, m := range []*Manager{a, b} {
			res := acquireOne(t, m, "s")
			require.Nil(t, res.Lease, "no token minted from a counter above 2^53")
			require.NotNil(t, res.Bad)
			require.Equal(t, RoleFence, res.Bad.Role)
			require.NoError(t, m.ReleaseAll(ctx))
		}
	}
	require.Equal(t, "9007199254740993", r.rdb.HGet(ctx, realKeys.Fencing("s"), keyspace.FieldToken).Val())

	const last = 1<<53 - 1
	require.NoError(t, r.rdb.HSet(ctx, realKeys.Fencing("s"), keyspace.FieldToken, strconv.Itoa(last-1)).Err())
	res := acquireOne(t, a, "s")
	require.Nil(t, res.Lease, "no token from a counter a year ahead of the clock")
	require.NotNil(t, res.Bad)
	require.Contains(t, res.Bad.Problem, "more than a year ahead of the server clock")
	require.Equal(t, strconv.Itoa(last-1), r.rdb.HGet(ctx, realKeys.Fencing("s"), keyspace.FieldToken).Val(), "left as it was")

	ahead := time.Now().Add(time.Hour).UnixMicro()
	require.NoError(t, r.rdb.HSet(ctx, realKeys.Fencing("s"), keyspace.FieldToken, strconv.FormatInt(ahead, 10)).Err())
	l := acquireOne(t, b, "s").Lease
	require.NotNil(t, l)
	require.Equal(t, ahead+1, l.Token())
	require.NoError(t, b.ReleaseAll(ctx))
}

// TestRealBadKeyWithoutTypeInACL: an ACL user without +type (the minimal
// user of older READMEs) still gets every bad key reported, per session,
// without its type, and the rest of the batch acquired.
func TestRealBadKeyWithoutTypeInACL(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	require.NoError(t, r.rdb.Do(ctx, "acl", "setuser", "notype", "on", ">pw", "~*", "+@all", "-type").Err())
	c := redis.NewClient(&redis.Options{Addr: r.srv.Addr(), Username: "notype", Password: "pw"})
	t.Cleanup(func() { _ = c.Close() })
	r.plantBad(t, RoleFence, "s2", "")
	m, err := New(Config{Client: c, Holder: "w1", LossQuarantine: -1})
	require.NoError(t, err)
	res := m.Acquire(ctx, []string{"s1", "s2", "s3"})
	require.NotNil(t, res[0].Lease, "%+v", res[0])
	require.NotNil(t, res[2].Lease, "%+v", res[2])
	require.NotNil(t, res[1].Bad, "%+v", res[1])
	require.Equal(t, "wrong type unknown", res[1].Bad.Problem)
	hs, err := NewReader(c, realKeys, 0).Inspect(ctx, []string{"s1", "s2"})
	require.NoError(t, err)
	require.Equal(t, "wrong type unknown", hs[1].Bad.Problem)
	require.NotEmpty(t, hs[0].Owner)
}
