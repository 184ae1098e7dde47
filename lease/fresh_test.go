package lease

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

// TestInitKeyspace: init writes the loss marker of a keyspace that holds
// no sign of use (sessions may be there already; other prefixes' keys do
// not count), so that the first acquisition takes its lease at once; it
// is a no-op once the marker exists; it refuses a keyspace that holds
// leases, fencing counters, handoff marks, states, heartbeats or members,
// and a server larger than its scan limit.
func TestInitKeyspace(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	keys := keyspace.Space{}
	tests := []struct {
		name      string
		give      func(t *testing.T)
		limit     int64
		wantErr   error
		wantWrote int
		want      InUseError
	}{
		{name: "empty", wantWrote: 1},
		{name: "sessions and other prefixes only", wantWrote: 1, give: func(t *testing.T) {
			require.NoError(t, rdb.Set(ctx, keys.Session("s1"), `{"id":"s1"}`, 0).Err())
			require.NoError(t, rdb.SAdd(ctx, keys.SessionBucketOf("s1"), "s1").Err())
			require.NoError(t, rdb.Set(ctx, "pollx:lease:{s1}", "w#1", 0).Err())
			require.NoError(t, rdb.Set(ctx, "other:fence:{s1}", "7", 0).Err())
		}},
		{name: "a lease", wantErr: ErrInUse, want: InUseError{Leases: 1, Example: keys.Lease("s1")}, give: func(t *testing.T) {
			require.NoError(t, rdb.Set(ctx, keys.Lease("s1"), "w#1", time.Minute).Err())
		}},
		{name: "a fencing counter", wantErr: ErrInUse, want: InUseError{Fences: 1, Example: keys.Fence("s1")}, give: func(t *testing.T) {
			require.NoError(t, rdb.Set(ctx, keys.Fence("s1"), "7", 0).Err())
		}},
		{name: "a handoff mark", wantErr: ErrInUse, want: InUseError{Marks: 1, Example: keys.Released("s1")}, give: func(t *testing.T) {
			require.NoError(t, rdb.Set(ctx, keys.Released("s1"), "1", time.Minute).Err())
		}},
		{name: "a state", wantErr: ErrInUse, want: InUseError{States: 1, Example: keys.State("s1")}, give: func(t *testing.T) {
			require.NoError(t, rdb.Set(ctx, keys.State("s1"), "x", 0).Err())
		}},
		{name: "a token high-water mark (leases were granted, none left)", wantErr: ErrInUse, want: InUseError{HighWater: 1, Example: keys.EpochTokens(0)}, give: func(t *testing.T) {
			require.NoError(t, rdb.Set(ctx, keys.EpochTokens(0), "1795000000000000", 0).Err())
		}},
		{name: "a heartbeat", wantErr: ErrInUse, want: InUseError{Heartbeats: 1, Example: keys.Node("w1")}, give: func(t *testing.T) {
			require.NoError(t, rdb.Set(ctx, keys.Node("w1"), "{}", time.Minute).Err())
		}},
		{name: "a member", wantErr: ErrInUse, want: InUseError{Members: 1}, give: func(t *testing.T) {
			require.NoError(t, rdb.ZAdd(ctx, keys.NodeIndex(), redis.Z{Score: 1, Member: "w1"}).Err())
		}},
		{name: "over the scan limit", limit: 2, wantErr: ErrTooLarge, give: func(t *testing.T) {
			for _, k := range []string{"a", "b", "c"} {
				require.NoError(t, rdb.Set(ctx, k, "1", 0).Err())
			}
		}},
		{name: "at the scan limit", limit: 3, wantWrote: 1, give: func(t *testing.T) {
			for _, k := range []string{"a", "b", "c"} {
				require.NoError(t, rdb.Set(ctx, k, "1", 0).Err())
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, rdb.FlushAll(ctx).Err())
			if tt.give != nil {
				tt.give(t)
			}
			limit := tt.limit
			if limit == 0 {
				limit = DefaultInitScanLimit
			}
			res, err := InitKeyspace(ctx, rdb, keys, limit)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.Zero(t, res.Written)
				require.Zero(t, rdb.Exists(ctx, keys.Epoch(0)).Val(), "nothing written")
				if tt.wantErr == ErrInUse {
					var use *InUseError
					require.ErrorAs(t, err, &use)
					require.Equal(t, tt.want, *use)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantWrote, res.Written)

			// The first acquisition takes its lease at once.
			m, err := New(Config{Client: rdb, Holder: "w1", TTL: time.Second})
			require.NoError(t, err)
			r := m.Acquire(ctx, []string{"s1"})
			require.NoError(t, r[0].Err)
			require.False(t, r[0].Quarantined)
			require.NotNil(t, r[0].Lease)

			// Once used, init is a no-op: it checks nothing, writes nothing.
			res, err = InitKeyspace(ctx, rdb, keys, limit)
			require.NoError(t, err)
			require.Equal(t, InitResult{}, res)
			require.NoError(t, m.ReleaseAll(ctx))
		})
	}
}

// TestInitKeyspaceOtherPrefix: a second deployment's prefix on a Redis
// that another one uses is new, and init says so.
func TestInitKeyspaceOtherPrefix(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, keyspace.Space{}.Fence("s1"), "7", 0).Err())
	_, err := InitKeyspace(ctx, rdb, keyspace.Space{}, 0)
	require.ErrorIs(t, err, ErrInUse)
	res, err := InitKeyspace(ctx, rdb, keyspace.Space{Prefix: "app2", SessionPrefix: "app2s"}, 0)
	require.NoError(t, err)
	require.Equal(t, 1, res.Written)
	require.Equal(t, int64(1), res.Checked)
}

// TestQuarantineLogSaysNewKeyspaceOrLossAndItsEnd: on a keyspace never
// used (no loss marker), the quarantine's log line says "new keyspace or
// lost data" and names init, not "Redis lost data", and its end is logged
// once, at the first lease taken after it.
func TestQuarantineLogSaysNewKeyspaceOrLossAndItsEnd(t *testing.T) {
	r := startReal(t)
	logs, withLogs := observed()
	const q = 300 * time.Millisecond
	m := r.manager(t, "a", useRealClock, withTTL(time.Second), withQuarantine(q), withLogs)
	require.True(t, acquireOne(t, m, "s").Quarantined)
	require.True(t, acquireOne(t, m, "s").Quarantined)
	started := logs.FilterField(zap.String("event", "quarantine")).All()
	require.Len(t, started, 1, "logged once")
	require.Contains(t, started[0].Message, "the keyspace is new or Redis lost data")
	require.Contains(t, started[0].Message, "pollworker init")
	require.Empty(t, logs.FilterField(zap.String("event", "quarantine_over")).All())

	require.Eventually(t, func() bool { return acquireOne(t, m, "s").Lease != nil }, 5*time.Second, 20*time.Millisecond)
	require.NotNil(t, acquireOne(t, m, "s2").Lease)
	require.Len(t, logs.FilterField(zap.String("event", "quarantine_over")).All(), 1, "its end logged once")
	require.NoError(t, m.ReleaseAll(context.Background()))
}
