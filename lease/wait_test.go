package lease

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

// TestRealWaitReplicas: with WaitReplicas, an acquisition or renewal that
// no replica acknowledged is not read as ownership (fail closed), and one
// that a replica acknowledged is.
func TestRealWaitReplicas(t *testing.T) {
	t.Parallel()
	r := startReal(t)
	ctx := context.Background()
	m := r.manager(t, "a", withWait(1, 100*time.Millisecond))

	res := acquireOne(t, m, "s")
	require.ErrorIs(t, res.Err, ErrNotReplicated, "no replica: the acquisition is not Held")
	require.Nil(t, res.Lease)
	require.NotEmpty(t, r.owner(t, "s"), "the key is there, kept for a retry with the same owner value")

	require.NoError(t, r.rdb.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err())
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", fmt.Sprint(r.srv.Port))
	rc := replica.Client(t)
	require.Eventually(t, func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, 10*time.Second, 20*time.Millisecond)
	// A link that is up may not acknowledge writes yet (the replica is
	// still loading what it was sent): wait until WAIT sees it.
	conn := r.rdb.Conn()
	defer func() { _ = conn.Close() }()
	require.Eventually(t, func() bool {
		// WAIT counts the replicas that have this connection's writes.
		if err := conn.Set(ctx, "wait-probe", "1", 0).Err(); err != nil {
			return false
		}
		n, err := conn.Do(ctx, "WAIT", 1, 100).Int()
		return err == nil && n >= 1
	}, 10*time.Second, 20*time.Millisecond)

	res = acquireOne(t, m, "s")
	require.NoError(t, res.Err)
	require.NotNil(t, res.Lease, "replicated: Held (the retry kept its owner value)")
	require.Equal(t, Held, res.Lease.State())

	replica.Stop()
	rep := m.RenewAll(ctx)
	require.ErrorIs(t, rep.Err, ErrNotReplicated)
	require.Equal(t, Uncertain, res.Lease.State(), "a renewal no replica has is not counted")
}

func withWait(n int, timeout time.Duration) func(*Config) {
	return func(c *Config) { c.WaitReplicas, c.WaitTimeout = n, timeout }
}
