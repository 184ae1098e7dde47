package lease

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

// TestRealBatchReadsRecordsWhereOneExists: acquire.lua reads each
// session's fencing record (and, in a keyspace of the layout before it,
// the old counter) only when one EXISTS over the whole call finds any: a
// cold start, where none exists, costs one command per session, and a
// record or old counter anywhere in a call (past the first chunk of the
// EXISTS too) still puts its session's token above it.
func TestRealBatchReadsRecordsWhereOneExists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 1000
	sessions := make([]string, n)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("s-%d", i)
	}
	batch := func(c *Config) { c.BatchSize = n }
	calls := func(t *testing.T, r *realEnv, cmd string) string {
		t.Helper()
		for _, line := range strings.Split(r.rdb.Info(ctx, "commandstats").Val(), "\n") {
			if strings.HasPrefix(line, "cmdstat_"+cmd+":") {
				return strings.TrimSpace(line)
			}
		}
		return ""
	}
	acquireAll := func(t *testing.T, m *Manager) map[string]int64 {
		t.Helper()
		tokens := map[string]int64{}
		seen := map[int64]bool{}
		for _, x := range m.Acquire(ctx, sessions) {
			require.NoError(t, x.Err)
			require.Nil(t, x.Bad)
			require.NotNil(t, x.Lease, x.Session)
			require.False(t, seen[x.Lease.Token()], "token %d minted twice", x.Lease.Token())
			seen[x.Lease.Token()] = true
			tokens[x.Session] = x.Lease.Token()
		}
		return tokens
	}

	t.Run("no record: no read per session", func(t *testing.T) {
		r := startReal(t)
		acquireAll(t, r.manager(t, "a", batch))
		require.Empty(t, calls(t, r, "hmget"), "no record read")
		require.Empty(t, calls(t, r, "mget"), "no old counter read")
		require.Contains(t, calls(t, r, "exists"), "calls=5,", "one EXISTS per chunk: 1, 8, 64, 512, 415 keys")
	})

	t.Run("one record, past the first chunk", func(t *testing.T) {
		r := startReal(t)
		ahead := time.Now().Add(time.Hour).UnixMicro()
		require.NoError(t, r.rdb.HSet(ctx, realKeys.Fencing("s-950"), keyspace.FieldToken, ahead).Err())
		tokens := acquireAll(t, r.manager(t, "a", batch))
		require.Greater(t, tokens["s-950"], ahead)
		require.Equal(t, tokens["s-950"], r.fence(t, "s-950"), "the record holds the new token")
		require.Zero(t, r.fence(t, "s-951"), "no record where there was none")
		require.Contains(t, calls(t, r, "hmget"), "calls=1000,", "each record read")
	})

	t.Run("one old counter, keyspace of the layout before", func(t *testing.T) {
		r := startReal(t)
		r.upgraded(t)
		ahead := time.Now().Add(time.Hour).UnixMicro()
		require.NoError(t, r.rdb.Set(ctx, realKeys.Fence("s-950"), ahead, 0).Err())
		tokens := acquireAll(t, r.manager(t, "a", batch))
		require.Greater(t, tokens["s-950"], ahead)
		require.Equal(t, tokens["s-950"], r.fence(t, "s-950"), "the record, upgraded, holds the token")
		require.Zero(t, r.rdb.Exists(ctx, realKeys.Fence("s-950")).Val(), "the old counter is gone")
	})

	t.Run("none in a keyspace of the layout before", func(t *testing.T) {
		r := startReal(t)
		r.upgraded(t)
		acquireAll(t, r.manager(t, "a", batch))
		require.Empty(t, calls(t, r, "hmget"), "no record read")
		require.Empty(t, calls(t, r, "mget"), "no old counter read")
	})
}
