package poller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// New validates cfg and returns a Coordinator; Run starts it.
func New(cfg Config) (*Coordinator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	reg, err := nodes.New(nodes.Config{Client: cfg.Client, Keys: cfg.Keys, ID: cfg.ID,
		Version: cfg.Version, TTL: cfg.HeartbeatTTL, Logger: cfg.Logger, Weight: cfg.Weight, Labels: cfg.Labels})
	if err != nil {
		return nil, errors.Join(ErrConfig, err)
	}
	cfg.ID = reg.ID()
	if tr := newTracing(cfg.TracerProvider, cfg.ID); tr != nil {
		cfg.tracing = tr
		onEvent := cfg.OnEvent
		cfg.OnEvent = func(e Event) {
			tr.leaseEvent(e)
			if onEvent != nil {
				onEvent(e)
			}
		}
	}
	store, err := session.NewStore(cfg.Client, cfg.Keys, session.WithLogger(cfg.Logger))
	if err != nil {
		return nil, errors.Join(ErrConfig, err)
	}
	c := &Coordinator{
		cfg:      cfg,
		log:      cfg.Logger.With(zap.String("instance", cfg.ID)),
		registry: reg,
		store:    store,
		loader:   session.NewLoader(store),
		news:     news{kick: make(chan struct{}, 1), releasedBy: make(map[string]struct{})},
		bad:      badData{log: cfg.Logger.With(zap.String("instance", cfg.ID)), obs: cfg.Observer, keys: cfg.Keys},
		view: view{
			sessions:  make(map[string]*session.Session),
			buckets:   make(map[int]*bucket),
			touched:   make(map[string]struct{}),
			staleHeld: make(map[int]struct{}),
			weighing:  weighing{planner: fleet.NewPlanner(cfg.BalanceSlack)},
		},
		held: make(map[string]*hold),
		claims: claims{
			orphanSince:    make(map[string]time.Time),
			contended:      make(map[string]contention),
			pendingOrphans: make(map[string]time.Time),
		},
	}
	sc := schedConfig{Clock: cfg.Clock, Turn: c.turn, Wake: c.trigger, Align: spreadStep,
		Limit: cfg.MaxPolls, MaxBackoff: cfg.MaxErrorBackoff, Pace: true, Slack: TimerSlack}
	if gl, ok := cfg.Poller.(GroupLimiter); ok {
		sc.GroupOf = func(s *session.Session) (string, int) { return gl.PollGroup(*s) }
	}
	c.sched = newScheduler(sc)
	c.leases, err = lease.New(lease.Config{Client: cfg.Client, Keys: cfg.Keys, Holder: cfg.ID, Incarnation: reg.Incarnation(),
		TTL: cfg.LeaseTTL, DriftMargin: cfg.DriftMargin, BatchSize: cfg.BatchSize, LossQuarantine: cfg.LossQuarantine,
		WaitReplicas: cfg.WaitReplicas,
		Clock:        cfg.Clock, Logger: cfg.Logger, OnChange: c.onLeaseChange})
	if err != nil {
		return nil, errors.Join(ErrConfig, err)
	}
	c.status.last.ID = cfg.ID
	return c, nil
}

// Run works until ctx is done, then drains: stops every poll (waiting up to
// DrainTimeout for those in flight), releases every lease whose poll has
// returned, announces it to peers and deletes its heartbeat. It returns
// after every goroutine it started has exited; the error is nil after a
// clean drain. It also stops, and returns an error matching
// nodes.ErrDuplicateID, when another live process claims this worker's id.
func (c *Coordinator) Run(ctx context.Context) error {
	if !c.run.started.CompareAndSwap(false, true) {
		return errors.New("poller: Run called twice")
	}
	ctx, c.run.stop = context.WithCancelCause(ctx)
	defer c.run.stop(nil)
	// Heartbeat and subscription stop before the drain (a heartbeat after
	// Leave would bring this worker back); renewal goes on until the polls
	// have stopped and the leases are released.
	memberCtx, stopMember := context.WithCancel(context.WithoutCancel(ctx))
	renewCtx, stopRenew := context.WithCancel(context.WithoutCancel(ctx))
	var member, renew sync.WaitGroup
	member.Add(2)
	go func() { defer member.Done(); c.heartbeatLoop(memberCtx) }()
	go func() { defer member.Done(); c.subscribeLoop(memberCtx) }()
	renew.Add(1)
	go func() { defer renew.Done(); c.renewLoop(renewCtx) }()

	c.mainLoop(ctx)

	stopMember()
	member.Wait()
	err := c.drain()
	stopRenew()
	renew.Wait()
	c.sched.Close()
	c.stopTimers()
	if cause := context.Cause(ctx); errors.Is(cause, nodes.ErrDuplicateID) {
		err = errors.Join(cause, err)
	}
	return err
}

func (c *Coordinator) mainLoop(ctx context.Context) {
	ticker := c.cfg.Clock.NewTicker(c.cfg.DiscoveryInterval)
	defer ticker.Stop()
	c.trigger()
	for {
		full := false
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
			full = true
		case <-c.news.kick:
		}
		c.round(ctx, full)
	}
}

func (c *Coordinator) heartbeatLoop(ctx context.Context) {
	ticker := c.cfg.Clock.NewTicker(c.cfg.HeartbeatInterval)
	defer ticker.Stop()
	joined := false
	for {
		c.shed()
		rctx, cancel := c.requestCtx(ctx)
		err := c.registry.Heartbeat(rctx)
		cancel()
		if errors.Is(err, nodes.ErrDuplicateID) {
			// Another live process claims this id (or took it over while
			// this one was paused past its heartbeat TTL): two workers of
			// one identity must not both poll. Stop, draining what this
			// process holds (its release and leave touch only its own).
			c.health.redisOK.Store(false)
			c.log.Error("another worker holds this id; stopping", zap.Error(err))
			c.run.stop(err)
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.health.redisOK.Store(false)
			c.cfg.Observer.RedisError("heartbeat")
			c.log.Warn("heartbeat failed", zap.Error(err))
		} else {
			if !joined {
				c.checkEvictionPolicy(ctx) // before this worker becomes ready
			}
			c.health.redisOK.Store(true)
			c.health.heartbeatAt.Store(c.cfg.Clock.Now().UnixNano())
			if !joined {
				joined = true
				c.publish(ctx, nodes.Event{Type: nodes.EventJoin, Node: c.cfg.ID})
				c.trigger()
			}
		}
		c.noteMemoryPressure()
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// shed sets why the worker is behind in its next heartbeat (nodes.Info.Behind,
// which status shows), steps c's shedding with whether it is behind now
// and, on a change, sets the weight its next heartbeat carries. Called
// from the heartbeat loop, before each heartbeat.
func (c *Coordinator) shed() {
	if err := c.registry.SetBehind(c.PollStats().Overload()); err != nil {
		c.log.Error("behind not published", zap.Error(err))
	}
	if c.cfg.KeepWeightWhenBehind {
		return
	}
	st := c.sched.Stats(false)
	fraction, changed := c.shedding.step(c.cfg.Clock.Now(), st.Behind.Behind, c.cfg.LeaseTTL)
	if !changed {
		return
	}
	base := nodes.Info{Weight: c.cfg.Weight}.PlanWeight() // 0 means 1
	w := max(base*fraction, 0.001)                        // the least weight nodes.ValidateWeight takes
	if err := c.registry.SetWeight(w); err != nil {
		c.log.Error("planned weight not changed", zap.Float64("weight", w), zap.Error(err))
		return
	}
	if st.Behind.Behind {
		c.log.Warn("behind: shedding load to the other workers", zap.Float64("planned_weight", w), zap.Float64("weight", base),
			zap.String("reason", st.Behind.Reason))
		return
	}
	c.log.Info("keeping up: taking load back", zap.Float64("planned_weight", w), zap.Float64("weight", base))
}

// noteMemoryPressure records what the last heartbeat found: while Redis is
// over maxmemory (noeviction) nobody can acquire, so the worker is not live
// (it acquires nothing, Ready is false) and hands nothing off (a peer could
// not take it), and it keeps polling what it holds: renewals and its own
// heartbeat allocate nothing and still pass. Each change is logged once.
func (c *Coordinator) noteMemoryPressure() {
	full := c.registry.OverMaxmemory()
	if c.health.redisFull.Swap(full) == full {
		return
	}
	if full {
		c.log.Warn("Redis is over maxmemory: keeping and polling the sessions held, acquiring and handing off nothing until it has room")
		return
	}
	c.log.Info("Redis has room again: acquiring and handing off as planned")
	c.trigger()
}

func (c *Coordinator) renewLoop(ctx context.Context) {
	ticker := c.cfg.Clock.NewTicker(c.cfg.RenewInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
		rctx, cancel := c.requestCtx(ctx)
		rep := c.leases.RenewAll(rctx)
		cancel()
		if rep.Renewed+len(rep.Lost)+len(rep.Uncertain) > 0 {
			c.cfg.Observer.RenewCycle(rep.RoundTrip, rep.Renewed, len(rep.Lost), len(rep.Uncertain))
		}
		if rep.Err != nil {
			if ctx.Err() != nil {
				return
			}
			c.health.redisOK.Store(false)
			c.cfg.Observer.RedisError("renew")
		} else if rep.Renewed > 0 {
			c.health.redisOK.Store(true)
		}
		if len(rep.Lost) > 0 {
			c.trigger()
		}
	}
}

func (c *Coordinator) subscribeLoop(ctx context.Context) {
	for ctx.Err() == nil {
		sub := c.cfg.Client.Subscribe(ctx, c.cfg.Keys.Events())
		ch := sub.Channel()
	recv:
		for {
			select {
			case <-ctx.Done():
				break recv
			case msg, ok := <-ch:
				if !ok {
					break recv
				}
				ev, err := nodes.DecodeEvent(msg.Payload)
				if err != nil {
					c.log.Debug("ignoring event", zap.Error(err))
					continue
				}
				if ev.Node == c.cfg.ID && ev.Type != nodes.EventCordon {
					continue // its own announcement (a cordon of this worker is news)
				}
				if ev.Type == nodes.EventJoin || ev.Type == nodes.EventLeave || ev.Type == nodes.EventCordon {
					c.news.peerNews.Store(true)
				}
				if ev.Type == nodes.EventRelease || ev.Type == nodes.EventLeave {
					c.news.releasedMu.Lock()
					c.news.releasedBy[ev.Node] = struct{}{}
					c.news.releasedMu.Unlock()
				}
				c.trigger()
			}
		}
		_ = sub.Close()
	}
}

func (c *Coordinator) onLeaseChange(l *lease.Lease, from, to lease.State) {
	var t EventType
	switch {
	case to == lease.Held && from == 0:
		t = EventAcquired
	case to == lease.Held:
		t = EventRecovered
	case to == lease.Uncertain:
		t = EventUncertain
	case to == lease.Lost:
		t = EventLost
		c.trigger()
	case to == lease.Released:
		t = EventReleased
	}
	c.sched.LeaseChanged(l, to)
	c.cfg.Observer.LeaseEvent(t, l.Reason())
	if c.cfg.OnEvent != nil {
		c.cfg.OnEvent(Event{Type: t, Session: l.Session(), Token: l.Token(), Reason: l.Reason(), At: c.cfg.Clock.Now()})
	}
}

// drain leaves the membership and tells the peers, stops every poll, and
// releases the leases whose polls have returned. Stopping the polls is bounded
// by DrainTimeout; each step after it has its own bounded time, so that a
// poll that outlives the drain costs only its own lease (left to expire),
// never the release of the others or the leave.
func (c *Coordinator) drain() error {
	owned := len(c.held)
	// Leave first: the peers plan without this worker at once, so that
	// no session released by another worker meanwhile is planned onto one
	// that is going away; they take this worker's sessions as it releases
	// them (its leases are renewed until then).
	start := c.cfg.Clock.Now()
	left := c.drainStep(c.leave)
	stopCtx, cancel := context.WithTimeout(context.Background(), c.cfg.DrainTimeout)
	stopped := c.stopAll(stopCtx)
	cancel()
	stoppedAt := c.cfg.Clock.Now()
	var errs []error
	released := 0
	if len(stopped) > 0 {
		var err error
		released, err = c.release(context.Background(), stopped, c.drainStepTimeout())
		if err != nil {
			errs = append(errs, err)
		}
	}
	if n := len(c.held); n > 0 {
		// Their polls ignored the cancellation: the leases are left to
		// expire in Redis, and given up here at once, so that no deadline
		// timer of theirs fires after Run has returned.
		stuck := make([]*lease.Lease, 0, n)
		for _, h := range c.held {
			stuck = append(stuck, h.loop.lease)
		}
		c.leases.Abandon(stuck...)
		errs = append(errs, fmt.Errorf("poller: drain timed out waiting for %d polls; their leases are left to expire", n))
	}
	if left != nil { // try once more
		if err := c.drainStep(c.leave); err != nil {
			errs = append(errs, err)
		}
	}
	log := c.log.Info
	if len(errs) > 0 {
		log = c.log.Warn
	}
	log("drained", zap.Int("sessions", owned), zap.Int("released", released),
		zap.Int("left to expire", owned-released), zap.Errors("errors", errs),
		zap.Duration("polls stopped in", stoppedAt.Sub(start)), zap.Duration("took", c.cfg.Clock.Since(start)))
	return errors.Join(errs...)
}

// leave removes this worker from the membership and announces it.
func (c *Coordinator) leave(ctx context.Context) error {
	if err := c.registry.Leave(ctx); err != nil {
		return err
	}
	return nodes.Publish(ctx, c.cfg.Client, c.cfg.Keys, nodes.Event{Type: nodes.EventLeave, Node: c.cfg.ID})
}

// drainStep runs one step of the drain with a fresh context bounded by
// drainStepTimeout.
func (c *Coordinator) drainStep(step func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.drainStepTimeout())
	defer cancel()
	return step(ctx)
}

// drainStepTimeout bounds each Redis step of a drain (each wave of its
// release) after the polls have stopped: at least 2 s (a release of many
// leases takes several round trips), and RequestTimeout when that is
// longer.
func (c *Coordinator) drainStepTimeout() time.Duration {
	return max(c.cfg.RequestTimeout, 2*time.Second)
}
