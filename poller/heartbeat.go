package poller

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/nodes"
)

// heartbeat keeps this worker a member: its loop (run) heartbeats every
// HeartbeatInterval, publishes how far behind the worker is and sheds
// load (shed), notes Redis's memory pressure and, at the first success,
// checks the eviction policy and announces the join; leave ends the
// membership. It writes health (Redis reachable, the last heartbeat,
// memory pressure, the eviction warning) and asks for rounds (news).
// Its shedding is its own; the rest is set by New and never changed.
type heartbeat struct {
	registry *nodes.Registry
	health   *health
	news     *news
	announce *announcer
	sched    *scheduler // its figures: behind or not (shed)
	shedding shedding   // the heartbeat loop's only
	client   redis.UniversalClient
	clock    clock.WithTickerAndDelayedExecution
	interval time.Duration // Config.HeartbeatInterval
	claimTTL time.Duration // Config.HeartbeatTTL: how long a crashed predecessor's claim of the id may stand
	timeout  time.Duration // Config.RequestTimeout
	leaseTTL time.Duration // the span shedding steps over
	weight   float64       // Config.Weight
	keep     bool          // Config.KeepWeightWhenBehind
	log      *zap.Logger
	obs      Observer
}

// waitForID waits, before this worker's first heartbeat, for another
// incarnation's claim of its id to expire (a process killed and
// restarted under the same id, as a container keeps its hostname), and
// reports whether it did; false when that claim is renewed meanwhile (a
// live process holds the id), a read fails or ctx ends. It reads the claim
// every twentieth of the heartbeat TTL (10 ms to 1 s).
func (hb *heartbeat) waitForID(ctx context.Context) bool {
	every := min(max(hb.claimTTL/20, 10*time.Millisecond), time.Second)
	err := hb.registry.WaitForID(ctx, every, func(c nodes.Claim) {
		hb.log.Warn("another incarnation's heartbeat entry holds this id; waiting for it to expire "+
			"(a worker killed and restarted with the same id); if it is renewed, that worker is alive and this one stops",
			zap.String("holder_host", c.Info.Host), zap.Int("holder_pid", c.Info.PID),
			zap.String("holder_incarnation", c.Info.Incarnation), zap.Duration("expires_in", c.TTL))
	})
	return err == nil
}

// run heartbeats until ctx is done; it calls stop, and returns, when
// another live process claims this worker's id (at start, once a claim of
// another incarnation has stood past its TTL unrenewed, it takes the id:
// waitForID).
func (hb *heartbeat) run(ctx context.Context, stop context.CancelCauseFunc) {
	ticker := hb.clock.NewTicker(hb.interval)
	defer ticker.Stop()
	joined := false
	for {
		hb.shed()
		rctx, cancel := context.WithTimeout(ctx, hb.timeout)
		err := hb.registry.Heartbeat(rctx)
		cancel()
		if errors.Is(err, nodes.ErrDuplicateID) && !joined && hb.waitForID(ctx) {
			continue // the claim was a crashed predecessor's, and expired
		}
		if errors.Is(err, nodes.ErrDuplicateID) {
			// Another live process claims this id (or took it over while
			// this one was paused past its heartbeat TTL): two workers of
			// one identity must not both poll. Stop, draining what this
			// process holds (its release and leave touch only its own).
			hb.health.redisOK.Store(false)
			hb.log.Error("another worker holds this id; stopping", zap.Error(err))
			stop(err)
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			hb.health.redisFailed("heartbeat", "heartbeat", err) // one warning per run of the same error
			reloadSlots(hb.client)
		} else {
			hb.health.worksAgain("heartbeat")
			if !joined {
				hb.checkEvictionPolicy(ctx) // before this worker becomes ready
			}
			hb.health.redisOK.Store(true)
			hb.health.heartbeatAt.Store(hb.clock.Now().UnixNano())
			if !joined {
				joined = true
				hb.announce.publish(ctx, nodes.EventJoin, nil)
				hb.news.trigger()
			}
		}
		hb.noteMemoryPressure()
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// shed sets why the worker is behind in its next heartbeat (nodes.Info.Behind,
// which status shows), steps its shedding with whether it is behind now
// and, on a change, sets the weight its next heartbeat carries. Called
// from the heartbeat loop, before each heartbeat.
func (hb *heartbeat) shed() {
	if err := hb.registry.SetBehind(pollStatsOf(hb.sched.Stats(true), hb.registry.Info().PlanWeight(), true).Overload()); err != nil {
		hb.log.Error("behind not published", zap.Error(err))
	}
	if hb.keep {
		return
	}
	st := hb.sched.Stats(false)
	fraction, changed := hb.shedding.step(hb.clock.Now(), st.Behind.Behind, hb.health.peerRoom.Load(), hb.leaseTTL)
	if !changed {
		return
	}
	base := nodes.Info{Weight: hb.weight}.PlanWeight() // 0 means 1
	w := max(base*fraction, 0.001)                     // the least weight nodes.ValidateWeight takes
	if err := hb.registry.SetWeight(w); err != nil {
		hb.log.Error("planned weight not changed", zap.Float64("weight", w), zap.Error(err))
		return
	}
	if st.Behind.Behind {
		hb.log.Warn("behind: shedding load to the other workers", zap.Float64("planned_weight", w), zap.Float64("weight", base),
			zap.String("reason", st.Behind.Reason))
		return
	}
	hb.log.Info("keeping up: taking load back", zap.Float64("planned_weight", w), zap.Float64("weight", base))
}

// noteMemoryPressure records what the last heartbeat found: while Redis is
// over maxmemory (noeviction) nobody can acquire, so the worker is not live
// (it acquires nothing, Ready is false) and hands nothing off (a peer could
// not take it), and it keeps polling what it holds: renewals and its own
// heartbeat allocate nothing and still pass. Each change is logged once.
func (hb *heartbeat) noteMemoryPressure() {
	full := hb.registry.OverMaxmemory()
	if hb.health.redisFull.Swap(full) == full {
		return
	}
	if full {
		hb.log.Warn("Redis is over maxmemory: keeping and polling the sessions held, acquiring and handing off nothing until it has room")
		return
	}
	hb.log.Info("Redis has room again: acquiring and handing off as planned")
	hb.news.trigger()
}

// leave removes this worker from the membership and announces it.
func (hb *heartbeat) leave(ctx context.Context) error {
	if err := hb.registry.Leave(ctx); err != nil {
		return err
	}
	return hb.announce.leave(ctx)
}

// checkEvictionPolicy warns when Redis may evict keys under memory
// pressure: with any policy but noeviction, leases (which have a TTL) and,
// with allkeys-*, fencing counters can disappear, which breaks the lease
// and fencing guarantees. A server that refuses CONFIG GET (a restricted
// ACL user, a managed service) is not an error: the check is skipped.
func (hb *heartbeat) checkEvictionPolicy(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, hb.timeout)
	defer cancel()
	res, err := hb.client.ConfigGet(rctx, "maxmemory-policy").Result()
	if err != nil {
		hb.log.Debug("cannot read maxmemory-policy; eviction check skipped", zap.Error(err))
		return
	}
	policy := res["maxmemory-policy"]
	if policy == "" || policy == "noeviction" {
		return
	}
	hb.health.evictionWarning.Store(true)
	hb.log.Warn("Redis may evict keys under memory pressure: leases and fencing counters can vanish; set maxmemory-policy noeviction",
		zap.String("maxmemory_policy", policy))
}
