package poller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
		Version: cfg.Version, TTL: cfg.HeartbeatTTL, Logger: cfg.Logger, Weight: cfg.Weight, Labels: cfg.Labels,
		BalanceSlack: cfg.BalanceSlack})
	if err != nil {
		return nil, errors.Join(ErrConfig, err)
	}
	cfg.ID = reg.ID()
	if enabled, known := contextTimeouts(cfg.Client); known && !enabled {
		cfg.Logger.Warn("the Redis client's ContextTimeoutEnabled is off: a request to a Redis that stops answering waits for "+
			"the client's read timeout, not RequestTimeout, so leases go Uncertain and polls stop later than they could (still "+
			"before their deadline); set ContextTimeoutEnabled: true in its options", zap.String("instance", cfg.ID))
	}
	cfg.tracing = newTracing(cfg.TracerProvider, cfg.ID)
	store, err := session.NewStore(cfg.Client, cfg.Keys, session.WithLogger(cfg.Logger))
	if err != nil {
		return nil, errors.Join(ErrConfig, err)
	}
	return assemble(cfg, reg, store)
}

// contextTimeouts reports whether client honours its contexts' deadlines
// (ContextTimeoutEnabled), known false for a client type it cannot tell.
func contextTimeouts(client redis.UniversalClient) (enabled, known bool) {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled, true
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled, true
	}
	return false, false
}

// assemble makes the Coordinator's parts and wires them, each to the few
// others it uses: the shared outlets (news, health, the announcer, bad
// data), the reading (view), the bookkeeping (claims), the scheduler and
// the turns it runs, the holdings (the leases and loops), and the
// background loops (heartbeat, renewer) and the reporter.
func assemble(cfg Config, reg *nodes.Registry, store *session.Store) (*Coordinator, error) {
	log := cfg.Logger.With(zap.String("instance", cfg.ID))
	guard := &guardedObserver{o: cfg.Observer, log: log}
	cfg.Observer = guard
	nw := newNews(cfg.Client, cfg.Keys, cfg.ID, log)
	hl := newHealth(cfg.Clock, heartbeatFresh(cfg.HeartbeatTTL, cfg.DriftMargin), cfg.Observer, log)
	guard.panics = &hl.observerPanics
	announce := &announcer{client: cfg.Client, keys: cfg.Keys, me: cfg.ID, timeout: cfg.RequestTimeout, obs: cfg.Observer, log: log}
	bad := &badData{log: log, obs: cfg.Observer, keys: cfg.Keys}
	cl := newClaims(cfg.Clock, nw.trigger, cfg.OrphanGrace)
	held := make(map[string]*hold)
	v := &view{
		me: cfg.ID, labels: cfg.Labels, sessNS: cfg.Keys.SessionNamespace(), clock: cfg.Clock, timeout: cfg.RequestTimeout, log: log,
		registry: reg, store: store, loader: session.NewLoader(store), news: nw, health: hl, claims: cl, bad: bad, held: held,
		sessions:  make(map[string]*session.Session),
		buckets:   make(map[int]*bucket),
		touched:   make(map[string]struct{}),
		staleHeld: make(map[int]struct{}),
		weighing:  weighing{planner: fleet.NewPlanner(cfg.BalanceSlack), ownSlack: cfg.BalanceSlack},
		audit:     newAudit(cmp.Or(cfg.auditPeriod, auditPeriod), cfg.DiscoveryInterval),
	}
	tn := &turns{poller: cfg.Poller, stateful: cfg.Stateful, states: cfg.StateStore, clock: cfg.Clock, timeout: cfg.RequestTimeout,
		tracing: cfg.tracing, obs: cfg.Observer, log: log, health: hl, bad: bad}
	sc := schedConfig{Clock: cfg.Clock, Turn: tn.turn, Wake: nw.trigger, Align: SpreadStep,
		Limit: cfg.MaxPolls, MaxBackoff: cfg.MaxErrorBackoff, Pace: true, Slack: TimerSlack, StallGap: stallGap, Log: log}
	if rc := newRuntimeCPU(); rc != nil {
		sc.CPU = rc.sample
	}
	if gl, ok := cfg.Poller.(GroupLimiter); ok {
		sc.GroupOf = func(s *session.Session) (string, int) { return gl.PollGroup(*s) }
	}
	sched := newScheduler(sc)
	tn.sched = sched
	c := &Coordinator{
		cfg: cfg, log: log, news: nw, health: hl, view: v, claims: cl,
		holdings: &holdings{held: held, sched: sched, turns: tn, view: v, claims: cl, news: nw, health: hl,
			announce: announce, clock: cfg.Clock, timeout: cfg.RequestTimeout, log: log, obs: cfg.Observer},
		beat: &heartbeat{registry: reg, health: hl, news: nw, sched: sched, announce: announce,
			client: cfg.Client, clock: cfg.Clock, interval: cfg.HeartbeatInterval, claimTTL: cfg.HeartbeatTTL, timeout: cfg.RequestTimeout,
			leaseTTL: cfg.LeaseTTL, weight: cfg.Weight, keep: cfg.KeepWeightWhenBehind, log: log, obs: cfg.Observer},
		report: &reporter{health: hl, sched: sched, registry: reg, readyBound: cfg.LeaseTTL + 2*cfg.DiscoveryInterval,
			maxPolls: cfg.MaxPolls, obs: cfg.Observer, log: log},
	}
	c.report.status.last.ID = cfg.ID
	leases, err := lease.New(lease.Config{Client: cfg.Client, Keys: cfg.Keys, Holder: cfg.ID, Incarnation: reg.Incarnation(),
		TTL: cfg.LeaseTTL, DriftMargin: cfg.DriftMargin, BatchSize: cfg.BatchSize, LossQuarantine: cfg.LossQuarantine,
		WaitReplicas: cfg.WaitReplicas, MinRenewAge: minRenewAge(cfg.RenewInterval, cfg.LeaseTTL, cfg.DriftMargin),
		Clock: cfg.Clock, Logger: cfg.Logger, OnChange: c.onLeaseChange})
	if err != nil {
		return nil, errors.Join(ErrConfig, err)
	}
	c.holdings.leases, tn.leases = leases, leases
	c.renew = &renewer{client: cfg.Client, leases: leases, health: hl, news: nw, clock: cfg.Clock, interval: cfg.RenewInterval,
		timeout: cfg.RequestTimeout, obs: cfg.Observer}
	return c, nil
}

// ErrRunTwice is Run's error when the Coordinator has run before (or runs):
// a Coordinator runs once; make a new one with New to run again.
var ErrRunTwice = errors.New("poller: Run called twice")

// Run works until ctx is done, then drains: stops every poll (waiting up to
// DrainTimeout for those in flight), releases every lease whose poll has
// returned, announces it to peers and deletes its heartbeat. It returns
// after every goroutine it started has exited, but for a poll still in a
// Poll that ignored its cancelled ctx past DrainTimeout: that poll is
// abandoned with its lease (left to expire; the error says how many), and
// the Observer hears nothing more of it. The error is nil after a clean
// drain. Once Run has returned, Ready is false. It also stops, and returns
// an error matching nodes.ErrDuplicateID, when another live process claims
// this worker's id (a crashed predecessor's claim found at start is
// waited out instead: at most HeartbeatTTL). A Coordinator runs once: a second call returns
// ErrRunTwice at once.
func (c *Coordinator) Run(ctx context.Context) error {
	if !c.run.started.CompareAndSwap(false, true) {
		return ErrRunTwice
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
	go func() { defer member.Done(); c.beat.run(memberCtx, c.run.stop) }()
	go func() { defer member.Done(); c.news.subscribe(memberCtx) }()
	renew.Add(1)
	go func() { defer renew.Done(); c.renew.run(renewCtx) }()

	c.mainLoop(ctx)

	stopMember()
	member.Wait()
	err := c.drain()
	stopRenew()
	renew.Wait()
	c.holdings.sched.Close()
	c.claims.stopTimers()
	if cause := context.Cause(ctx); errors.Is(cause, nodes.ErrDuplicateID) {
		err = errors.Join(cause, err)
	}
	c.health.markStopped()
	return err
}

func (c *Coordinator) mainLoop(ctx context.Context) {
	ticker := c.cfg.Clock.NewTicker(c.cfg.DiscoveryInterval)
	defer ticker.Stop()
	c.news.trigger()
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
		c.view.confirmAll.Store(true)
		c.news.trigger()
	case to == lease.Released:
		t = EventReleased
	}
	c.holdings.sched.LeaseChanged(l, to)
	e := Event{Type: t, Session: l.Session(), Token: l.Token(), Reason: l.Reason(), At: c.cfg.Clock.Now()}
	if tr := c.cfg.tracing; tr != nil {
		tr.leaseEvent(e)
	}
	c.cfg.Observer.LeaseEvent(e)
}

// drain leaves the membership and tells the peers, stops every poll, and
// releases each lease as its poll has returned (those with no poll running
// at once, in waves soonest due first). Stopping the polls is bounded by
// DrainTimeout, then the polls still running are aborted and get
// abortGrace; each release has its own bounded time, so that a poll that
// outlives the drain costs only its own lease (left to expire), never the
// release of the others or the leave.
func (c *Coordinator) drain() error {
	owned := len(c.holdings.held)
	// Leave first: the peers plan without this worker at once, so that
	// no session released by another worker meanwhile is planned onto one
	// that is going away; they take this worker's sessions as it releases
	// them (its leases are renewed until then).
	start := c.cfg.Clock.Now()
	left := c.drainStep(c.beat.leave)
	var errs []error
	released, releaseFailed := 0, false
	stopCtx, cancel := context.WithTimeout(context.Background(), c.cfg.DrainTimeout)
	c.holdings.stopAll(stopCtx, func(stopped []lease.Handoff) {
		n, err := c.holdings.release(context.Background(), stopped, c.drainStepTimeout())
		released += n
		if err != nil {
			errs, releaseFailed = append(errs, err), true
		}
	})
	cancel()
	stoppedAt := c.cfg.Clock.Now()
	if n := len(c.holdings.held); n > 0 {
		// Their polls ignored the cancellation: the leases are left to
		// expire in Redis, and given up here at once, so that no deadline
		// timer of theirs fires after Run has returned.
		stuck := make([]*lease.Lease, 0, n)
		for _, h := range c.holdings.held {
			stuck = append(stuck, h.loop.lease)
		}
		c.holdings.leases.Abandon(stuck...)
		errs = append(errs, fmt.Errorf("poller: drain timed out waiting for %d polls; their leases are left to expire", n))
	}
	switch {
	case left != nil && releaseFailed:
		// Not tried again: a release failed too, so Redis still does not
		// answer, and another try would only add a step's timeout to the
		// shutdown (the entry expires with its TTL).
		errs = append(errs, left)
	case left != nil: // try once more
		if err := c.drainStep(c.beat.leave); err != nil {
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

// minRenewAge is lease.Config.MinRenewAge for renewal cycles every
// interval: half of it, so that a lease taken just before a cycle is not
// renewed at once, but never so much that a lease gets fewer than two
// renewals before its deadline (ttl - drift after its request), the second
// within 2 × interval + minRenewAge of it; 0 when ttl leaves no room.
func minRenewAge(interval, ttl, drift time.Duration) time.Duration {
	return max(0, min(interval/2, ttl-drift-2*interval))
}
