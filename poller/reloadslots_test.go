package poller

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// slotReads counts the CLUSTER SLOTS a client sends.
type slotReads struct{ n atomic.Int64 }

func (s *slotReads) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *slotReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "cluster") && len(cmd.Args()) > 1 && strings.EqualFold(cmd.Args()[1].(string), "slots") {
			s.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (s *slotReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestReloadSlotsAfterAFailure: a failed renewal or heartbeat makes a
// Cluster client read its slot map again at once (a master killed and
// replaced by its replica left its slots on the dead address for the 60 s
// of go-redis's default reload interval); other clients are left alone.
func TestReloadSlotsAfterAFailure(t *testing.T) {
	mr := miniredis.RunT(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{mr.Addr()}})
	t.Cleanup(func() { _ = cc.Close() })
	reads := &slotReads{}
	cc.OnNewNode(func(c *redis.Client) { c.AddHook(reads) })
	require.NoError(t, cc.Ping(context.Background()).Err()) // the first slot map
	before := reads.n.Load()
	reloadSlots(cc)
	require.Eventually(t, func() bool { return reads.n.Load() > before }, 5*time.Second, time.Millisecond, "the slot map is read again")
	plain := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = plain.Close() })
	reloadSlots(plain) // not a Cluster client: nothing
}
