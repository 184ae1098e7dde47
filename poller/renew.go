package poller

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/lease"
)

// renewer renews every held lease each RenewInterval, in one batched
// round trip (lease.Manager.RenewAll), on its own goroutine until Run's
// drain has released the leases. It writes health (Redis reachable) and
// asks for a round when a lease was lost; its fields are set by New.
type renewer struct {
	client   redis.UniversalClient // Config.Client: a Cluster client is asked to reload its slots after a failed cycle
	leases   *lease.Manager
	health   *health
	news     *news
	clock    clock.WithTickerAndDelayedExecution
	interval time.Duration // Config.RenewInterval
	timeout  time.Duration // Config.RequestTimeout
	obs      Observer
}

// reloadSlots asks a Cluster client to read its slot map again (at once,
// in the background; go-redis runs one reload at a time): a request that
// failed may have gone to a master that died, whose replica took its
// slots, which go-redis otherwise learns only at its
// ClusterStateReloadInterval (60 s by default) or at a MOVED reply the
// dead master never sends. Other clients are left as they are.
func reloadSlots(client redis.UniversalClient) {
	if cc, ok := client.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// run renews until ctx is done.
func (rn *renewer) run(ctx context.Context) {
	ticker := rn.clock.NewTicker(rn.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
		rctx, cancel := context.WithTimeout(ctx, rn.timeout)
		rep := rn.leases.RenewAll(rctx)
		cancel()
		if rep.Renewed+len(rep.Lost)+len(rep.Uncertain) > 0 {
			rn.obs.RenewCycle(RenewReport{RoundTrip: rep.RoundTrip, Renewed: rep.Renewed, Lost: len(rep.Lost), Uncertain: len(rep.Uncertain)})
		}
		if rep.Err != nil {
			if ctx.Err() != nil {
				return
			}
			rn.health.redisOK.Store(false)
			rn.obs.RedisError("renew")
			reloadSlots(rn.client)
		} else if rep.Renewed > 0 {
			rn.health.redisOK.Store(true)
		}
		if len(rep.Lost) > 0 {
			rn.news.trigger()
		}
	}
}
