package poller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// Coordinator runs one worker: heartbeat, membership, session list,
// ownership by rendezvous hashing, leases, and the polls of the owned
// sessions (one timer for all of them; a goroutine only while a poll runs).
type Coordinator struct {
	cfg      Config
	log      *zap.Logger
	registry *nodes.Registry
	store    *session.Store
	loader   *session.Loader
	leases   *lease.Manager

	running atomic.Bool
	stopRun context.CancelCauseFunc // ends Run's main loop with a cause (set by Run)

	news   news   // what other goroutines tell the main loop
	health health // what the main loop and the background loops tell readers

	shedding shedding // the heartbeat loop's only
	bad      badData  // bad records reported once each (baddata.go)

	statusMu sync.Mutex
	status   Status // published by the main loop at the end of a round

	// Owned by the main loop (mainLoop and what it calls; drain after it).
	view   view             // what the worker knows of the fleet and the sessions
	claims claims           // its bookkeeping of contended and orphaned sessions
	held   map[string]*hold // the sessions it holds, by id: their poll loops and what the round decided of them
	sched  *scheduler       // runs the poll loops of the sessions it holds
}

// news is what the heartbeat, subscription and lease goroutines tell the
// main loop; each field is safe for concurrent use.
type news struct {
	kick       chan struct{} // asks the main loop for a round; capacity 1
	peerNews   atomic.Bool   // a peer joined or left since membership was last read
	releasedMu sync.Mutex
	releasedBy map[string]struct{} // peers that announced a release or leave since the last round
}

// health is what the worker reports about itself; atomics, read by Ready,
// Status and the metrics from any goroutine.
type health struct {
	redisOK         atomic.Bool
	heartbeatAt     atomic.Int64 // clock time (UnixNano) of the last successful heartbeat
	redisFull       atomic.Bool  // the last heartbeat found Redis over maxmemory (nodes.Registry.OverMaxmemory)
	evictionWarning atomic.Bool  // Redis runs an evicting maxmemory-policy
	shareTaken      atomic.Bool  // held its planned share once since start (or readyBound passed)
	pollPanics      atomic.Int64
	pollErrors      atomic.Int64
	polls           atomic.Int64
}

// view is the worker's picture of the fleet and the sessions, refreshed
// from Redis each round (refresh) and read by the rest of the round. Owned
// by the main loop.
type view struct {
	members        nodes.Membership
	fleet          *assign.Fleet               // the live members, ranked per bucket
	plan           *assign.Plan                // where every bucket goes
	sizes          []int                       // bucket -> number of sessions in it
	weighing       weighing                    // the loads and weights the plan weighs (buckets.go)
	buckets        map[int]*bucket             // buckets assigned here, or watched for orphans
	sessions       map[string]*session.Session // active sessions of assigned buckets, and those polled here; never changed in place (a worker shares its definition)
	seenRev        int64                       // session revision whose changes are applied
	synced         bool                        // seenRev is meaningful
	membersChanged bool                        // since the last Round report
	touched        map[string]struct{}         // sessions whose standing may have changed since the last round
	sweepAll       bool                        // the next round looks at every session (assignment changed)
	wasMember      bool                        // member at the last round
	memberSince    time.Time                   // first round as a member (readiness bound)
	behind         PollStats                   // PollStats at the last change of Behind or its reason (logged)
	// staleHeld are the buckets changed since the sessions polled here
	// in them were last read, and recheckAll says every bucket may have
	// (the change record was lost): recheckHeld reads those sessions
	// again when no bucket read of the round covered them.
	staleHeld  map[int]struct{}
	recheckAll bool
}

// claims is the main loop's bookkeeping of sessions it could not simply
// acquire or keep: those another worker held (contended), orphans and the
// watch for them, sessions held back from a handoff, and the timers that
// ask for a round when one of these is due. Owned by the main loop.
type claims struct {
	contended        map[string]contention // sessions another worker held at the last try
	orphanSince      map[string]time.Time  // owned sessions taken as orphans
	pendingOrphans   map[string]time.Time  // watched sessions first seen without a lease
	lastOrphan       time.Time
	watchFrom        time.Time // no orphan watch before then (set at the first round)
	orphanWatchUntil time.Time // scan at full rate until then
	settleAt         time.Time // a session held back from a handoff may move then (settled)
	retryTimer       clock.Timer
	retryAt          time.Time // when retryTimer fires
	expiryTimer      clock.Timer
}

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
	c.status.ID = cfg.ID
	return c, nil
}

// ID is this worker's id.
func (c *Coordinator) ID() string { return c.cfg.ID }

// Ready reports whether the worker holds a fresh heartbeat, reached Redis
// on its last attempt, and has held its planned share of the sessions once
// since it started (or waited readyBound, LeaseTTL + 2 × DiscoveryInterval,
// for it): what a rolling update should wait for before it replaces the
// next worker. A worker without a fresh heartbeat or Redis, or while
// Redis is over maxmemory, acquires nothing.
//
// Ready does not turn false when the worker is behind (PollStats.Behind):
// an unready worker keeps its sessions (the plan follows heartbeats, not
// readiness) and gets no traffic to lose, so unreadiness would relieve
// nothing; it would only stall a rollout, including the one that gives
// the fleet more room, and drop the worker from scrapes that skip unready
// targets, just when its metrics matter. Behind is reported beside it;
// an embedder that wants both can use Ready() && !PollStats().Behind.
func (c *Coordinator) Ready() bool {
	return c.live() && c.health.shareTaken.Load()
}

// live reports whether the worker holds a fresh heartbeat and reached Redis
// on its last attempt, and Redis has room (noteMemoryPressure): what it
// needs to take sessions.
func (c *Coordinator) live() bool {
	if !c.health.redisOK.Load() || c.health.redisFull.Load() {
		return false
	}
	at := c.health.heartbeatAt.Load()
	if at == 0 {
		return false
	}
	return c.cfg.Clock.Since(time.Unix(0, at)) < c.cfg.HeartbeatTTL-c.cfg.DriftMargin
}

// Status is a snapshot of what the worker sees and holds.
type Status struct {
	// ID is the worker id.
	ID string
	// Ready is Ready() at the time of the snapshot.
	Ready bool
	// Members are the live workers seen in the last round.
	Members []string
	// Sessions is the number of active (not paused) sessions assigned to
	// this worker, or polled by it as orphans.
	Sessions int
	// Owned are the sessions whose lease this worker holds, sorted.
	Owned []string
	// Polls, PollErrors and PollPanics count polls since start.
	Polls, PollErrors, PollPanics int64
	// PollsRunning and PollsWaiting are the polls running now and those
	// due but waiting for a slot (Config.MaxPolls).
	PollsRunning, PollsWaiting int
	// PollsDeferred counts the polls that waited for a slot since start,
	// PollsLate those that started later than a tenth of their interval
	// after they were due: a worker that cannot keep up with its share.
	PollsDeferred, PollsLate int64
	// Backoff is the number of sessions whose last poll failed and that
	// are polled less often for it (Config.MaxErrorBackoff).
	Backoff int
	// Behind is PollStats.Behind: the worker cannot keep up with its share.
	Behind bool
	// Malformed is the number of malformed session entries in the buckets
	// assigned to this worker.
	Malformed int
	// EvictionRisk is set when Redis runs a maxmemory-policy other than
	// noeviction (leases and counters may be evicted).
	EvictionRisk bool
}

// Status returns a snapshot for health pages and tests.
func (c *Coordinator) Status() Status {
	c.statusMu.Lock()
	s := c.status
	c.statusMu.Unlock()
	s.Ready = c.Ready()
	s.Owned = nil
	for _, l := range c.leases.Held() {
		if l.State() == lease.Held {
			s.Owned = append(s.Owned, l.Session())
		}
	}
	s.Polls, s.PollErrors, s.PollPanics = c.health.polls.Load(), c.health.pollErrors.Load(), c.health.pollPanics.Load()
	ps := c.PollStats()
	s.PollsRunning, s.PollsWaiting, s.PollsDeferred, s.PollsLate, s.Backoff = ps.Running, ps.Waiting, ps.Deferred, ps.Late, ps.Backoff
	s.Behind = ps.Behind
	s.EvictionRisk = c.health.evictionWarning.Load()
	return s
}

// PollStats is what the poll scheduler reports: cheap to read (no lease
// list), for metrics.
type PollStats struct {
	// Running and Waiting are the polls running now and those due but
	// waiting for a slot (Config.MaxPolls).
	Running, Waiting int
	// Deferred and Late count, since start, the polls that waited for a
	// slot and those that started later than a tenth of their interval
	// after they were due.
	Deferred, Late int64
	// Backoff is the number of sessions backing off after failed polls,
	// counted now among the poll loops running here.
	Backoff int
	// LeasesHeld is the number of leases this worker holds (lease.Held)
	// with a running poll loop, counted now.
	LeasesHeld int
	// PlannedWeight is the weight this worker's heartbeat carries, which
	// its peers plan with: Config.Weight (1 when 0), lower while the
	// worker sheds load after staying behind (Config.KeepWeightWhenBehind).
	PlannedWeight float64
	// Behind reports a worker that cannot keep up with its share: over
	// the last 4 s it ran fewer than 90 % of the polls its sessions were
	// due (DueRate, AchievedRate; it clears at 95 %), or a poll has waited
	// for a slot longer than max(1s, its interval). Polls wait for slots
	// in order of due time, so every session slows alike, to about
	// interval × DueRate/AchievedRate. A worker behind needs more room
	// (BehindReason says which) or fewer sessions; it sheds load to its
	// peers (Config.KeepWeightWhenBehind). Ready does not include it (see
	// Ready).
	Behind bool
	// BehindReason says what holds the polls back while Behind:
	// BehindHostLimit, BehindMaxPolls or BehindCPU.
	BehindReason string
	// BehindHost is, with BehindHostLimit, the host (GroupLimiter's group)
	// with the most polls waiting for a slot.
	BehindHost string
	// DueRate and AchievedRate are the polls per second the held sessions
	// were due and those run, over the last 4 s (see Behind).
	DueRate, AchievedRate float64
	// Skipped counts the polls the Poller did not send for want of a
	// local resource (ErrNoCapacity), since start: not failures.
	Skipped int64
}

// PollStats returns the scheduler's figures now. Backoff and LeasesHeld
// are counted from the poll loops (O(sessions held)): read them at scrape
// or status time, not in a hot loop.
func (c *Coordinator) PollStats() PollStats { return c.pollStats(true) }

// pollStats is PollStats; without countLoops, Backoff and LeasesHeld are
// left at 0 (the main loop's checkBehind needs neither).
func (c *Coordinator) pollStats(countLoops bool) PollStats {
	st := c.sched.Stats(countLoops)
	ps := PollStats{Running: st.Running, Waiting: st.Waiting, Deferred: st.Deferred, Late: st.Late,
		Behind: st.Behind.Behind, BehindReason: st.Behind.Reason, BehindHost: st.Behind.Group,
		DueRate: st.Behind.Due, AchievedRate: st.Behind.Done, Skipped: st.Skipped,
		PlannedWeight: c.registry.Info().PlanWeight()}
	if countLoops {
		ps.LeasesHeld, ps.Backoff = st.Held, st.Backoff
	}
	return ps
}

// Leases is the lease manager, for embedders that want to inspect leases.
func (c *Coordinator) Leases() *lease.Manager { return c.leases }

// Run works until ctx is done, then drains: stops every poll (waiting up to
// DrainTimeout for those in flight), releases every lease whose poll has
// returned, announces it to peers and deletes its heartbeat. It returns
// after every goroutine it started has exited; the error is nil after a
// clean drain. It also stops, and returns an error matching
// nodes.ErrDuplicateID, when another live process claims this worker's id.
func (c *Coordinator) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("poller: Run called twice")
	}
	ctx, c.stopRun = context.WithCancelCause(ctx)
	defer c.stopRun(nil)
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

// trigger asks for a round as soon as possible; many triggers coalesce.
func (c *Coordinator) trigger() {
	select {
	case c.news.kick <- struct{}{}:
	default:
	}
}

func (c *Coordinator) requestCtx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, c.cfg.RequestTimeout)
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
			c.stopRun(err)
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

func (c *Coordinator) publish(ctx context.Context, ev nodes.Event) {
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	if err := nodes.Publish(rctx, c.cfg.Client, c.cfg.Keys, ev); err != nil {
		c.cfg.Observer.RedisError("publish")
		c.log.Debug("publish failed", zap.String("type", string(ev.Type)), zap.Error(err))
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

func (c *Coordinator) stopTimers() {
	if c.claims.retryTimer != nil {
		c.claims.retryTimer.Stop()
	}
	if c.claims.expiryTimer != nil {
		c.claims.expiryTimer.Stop()
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
