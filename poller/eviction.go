package poller

import (
	"context"

	"go.uber.org/zap"
)

// checkEvictionPolicy warns when Redis may evict keys under memory
// pressure: with any policy but noeviction, leases (which have a TTL) and,
// with allkeys-*, fencing counters can disappear, which breaks the lease
// and fencing guarantees. A server that refuses CONFIG GET (a restricted
// ACL user, a managed service) is not an error: the check is skipped.
func (c *Coordinator) checkEvictionPolicy(ctx context.Context) {
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	res, err := c.cfg.Client.ConfigGet(rctx, "maxmemory-policy").Result()
	if err != nil {
		c.log.Debug("cannot read maxmemory-policy; eviction check skipped", zap.Error(err))
		return
	}
	policy := res["maxmemory-policy"]
	if policy == "" || policy == "noeviction" {
		return
	}
	c.health.evictionWarning.Store(true)
	c.log.Warn("Redis may evict keys under memory pressure: leases and fencing counters can vanish; set maxmemory-policy noeviction",
		zap.String("maxmemory_policy", policy))
}
