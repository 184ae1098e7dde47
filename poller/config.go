package poller

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/state"
)

// Defaults of Config, from the design research.
const (
	DefaultLeaseTTL          = 30 * time.Second
	DefaultRenewInterval     = 10 * time.Second
	DefaultHeartbeatInterval = 10 * time.Second
	DefaultDiscoveryInterval = 10 * time.Second
	DefaultDrainTimeout      = 10 * time.Second
	DefaultMaxPolls          = 1024
	DefaultMaxErrorBackoff   = 15 * time.Minute
	DefaultBalanceSlack      = 0.05
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("poller: invalid config")

// Config configures a Coordinator. One zero rule for every field: zero
// takes the default; a setting that can be turned off (LossQuarantine,
// MaxPolls, MaxErrorBackoff, BalanceSlack) is turned off by a negative
// value (Off). RegisterFlags registers the operator settings as flags (the
// flags of pollworker run), Validate checks every rule, Settings lists the
// effective values.
type Config struct {
	// Client is the Redis connection (standalone, Sentinel or Cluster).
	// Required. Enable its ContextTimeoutEnabled option (New logs a warning
	// for a *redis.Client or *redis.ClusterClient without it): the coordinator
	// bounds every round trip with a context deadline, which go-redis
	// otherwise ignores in favour of its own read timeout. A
	// *redis.ClusterClient is asked to read its slot map again after a
	// failed renewal or heartbeat (a master that died leaves its slots on
	// its address until then); give it a short ClusterStateReloadInterval
	// too (pollworker run uses 2s; go-redis's default is 60s).
	Client redis.UniversalClient
	// Keys names the keys; the zero value uses prefixes "poll" and "session".
	Keys keyspace.Space
	// ID names this worker; default nodes.DefaultID().
	ID string
	// Version is published in the heartbeat.
	Version string
	// Poller does the work (Poll, with the Turn of each poll). Required.
	Poller Poller
	// Stateful turns on the sessions' fenced state (Turn.State): before
	// the first poll under each lease the session's last saved record is
	// read (after the acquisition, so it holds every earlier holder's last
	// save; a corrupt record reads as never saved), and after a crash the
	// saved poll time keeps the session's schedule. Off by default: a
	// Poller that keeps no state costs no read per acquisition, and
	// Turn.State is nil.
	Stateful bool
	// StateStore keeps the sessions' state (its size limit, its clock)
	// and the slots of scheduled sessions (the slot started, finished);
	// default state.NewStore(Client, Keys, state.WithClock(Clock)) when
	// Stateful is set, none otherwise (a scheduled session's slots are then
	// not recorded: a successor after a crash cannot tell which slot ran).
	// A store of your own must use Keys and Clock too (state.WithClock).
	StateStore *state.Store

	// LeaseTTL is the lease time to live; default 30s. At least 3 × RenewInterval.
	// The timings below that are left zero follow it (see FailoverBound):
	// setting LeaseTTL alone sets how long a crashed worker's sessions wait
	// for a new poller, about one LeaseTTL.
	LeaseTTL time.Duration
	// RenewInterval is the time between renewal cycles; default LeaseTTL/3
	// (10s).
	RenewInterval time.Duration
	// DriftMargin is taken off every lease deadline; default LeaseTTL/100 + 2ms.
	DriftMargin time.Duration
	// HeartbeatInterval is the time between heartbeats; default LeaseTTL/3
	// (10s).
	HeartbeatInterval time.Duration
	// HeartbeatTTL is how long a heartbeat keeps this worker live; default
	// 3 × HeartbeatInterval (LeaseTTL when both are left zero, 30s). A
	// crashed worker's sessions go to its peers once both its heartbeat
	// and its leases have expired: see FailoverBound.
	HeartbeatTTL time.Duration
	// DiscoveryInterval is the time between full rounds (membership,
	// sessions, ownership) when no event arrives; default LeaseTTL/3, at
	// most 10s (10s).
	DiscoveryInterval time.Duration
	// OrphanGrace is how long a session may stay without a lease before a
	// worker that is not its preferred owner takes it; default
	// 2 × DiscoveryInterval (20s). A worker starts this watch OrphanGrace after
	// its first round, when a fleet starting together has had time to take
	// its sessions.
	OrphanGrace time.Duration
	// DrainTimeout bounds how long the shutdown waits for the polls in
	// flight to return; default 10s. Polls still running then are
	// cancelled (and waited for one more second), and their leases are
	// left to expire. The release of the other leases, the leave and its
	// announcement then get max(RequestTimeout, 2s) each.
	DrainTimeout time.Duration
	// RequestTimeout bounds each Redis round trip of the coordinator;
	// default RenewInterval/2, at most 5s.
	RequestTimeout time.Duration
	// LossQuarantine is how long no free lease is taken after Redis is
	// seen to have lost data (or restarted, or failed over); default
	// LeaseTTL, negative turns it off. See lease.Config.LossQuarantine.
	LossQuarantine time.Duration
	// WaitReplicas, if positive, makes acquisitions and renewals count only
	// once WAIT confirms this many replicas have them (a failover to a
	// caught-up replica then loses no lease); default 0. See
	// lease.Config.WaitReplicas.
	WaitReplicas int
	// MaxPolls bounds the polls this worker runs at once; a poll due while
	// all run waits for one to return, oldest first, and is counted
	// (Status.PollsDeferred, and PollsLate when it starts later than a
	// tenth of its interval after it was due). The leases, heartbeats and
	// rounds never wait for it. Default DefaultMaxPolls; negative means
	// no bound.
	MaxPolls int
	// MaxErrorBackoff bounds how much longer than its interval a session
	// whose polls keep failing waits between polls: after k consecutive
	// failures its interval grows by (2^min(k,5) - 1) × interval, at most
	// this, with jitter; a success resets it. Default
	// DefaultMaxErrorBackoff; negative turns the backoff off.
	MaxErrorBackoff time.Duration
	// BatchSize is the number of sessions per lease script call; default 500.
	BatchSize int
	// BalanceSlack bounds each worker's share of the poll load to
	// its weight's share × (1+BalanceSlack) (rendezvous hashing of the
	// index buckets with bounded loads, each bucket weighing its polls per
	// day, or its number of sessions in an index written before loads were
	// kept; see session.PollsPerDay); default 0.05. A bucket larger than
	// the room left anywhere can exceed the bound. A negative value turns
	// the bound off (plain rendezvous hashing: minimal movement,
	// statistical balance). It is carried in the heartbeat
	// (nodes.Info.BalanceSlack), and every worker plans with the tightest
	// bound any member asks for (fleet.AgreedSlack), so that workers
	// configured differently still agree on the plan; the worker logs a
	// warning while they differ.
	BalanceSlack float64
	// Weight is this worker's capacity relative to its peers (a worker of
	// weight 2 gets twice the load of one of weight 1), carried in its
	// heartbeat (nodes.Info.Weight) so that every worker plans with it;
	// default 0, meaning 1. See nodes.ValidateWeight.
	Weight float64
	// KeepWeightWhenBehind keeps Weight in the heartbeat while the worker
	// is behind (PollStats.Behind). By default a worker that stays behind
	// sheds load: after each whole LeaseTTL it stays behind (the first
	// step two LeaseTTLs into its late polls: one to become behind, one
	// behind), the weight its heartbeat carries drops to 3/4 (to no less
	// than a quarter of Weight), so that its peers plan less for it at
	// their next full round and take the rest over by graceful handoffs;
	// after 10 LeaseTTLs without being
	// behind it takes a tenth of Weight back, and so on up to Weight. It
	// sheds only while some peer keeps up (no Behind in its heartbeat
	// info): a fleet behind as a whole sheds nothing, as a session moved
	// between workers that cannot poll it either only gains a handoff.
	KeepWeightWhenBehind bool
	// Labels are this worker's labels (nodes.Labels: key=value pairs),
	// carried in its heartbeat: a session with a selector is placed only
	// on, and polled only by, workers whose labels match it. Fixed for the
	// Coordinator's life: a worker whose labels change is a new process.
	Labels map[string]string

	// Logger receives structured logs; default no-op.
	Logger *zap.Logger
	// Clock drives timers and deadlines; default the real clock.
	Clock clock.WithTickerAndDelayedExecution
	// Observer receives the worker's lease events and measurements (see
	// Observer: which goroutine calls each hook; none may block); default
	// NopObserver.
	Observer Observer
	// TracerProvider, if set, traces the worker with OpenTelemetry: a span
	// "poll" per poll (attributes pollworker.session, .worker, .token,
	// .attempt, .outcome), in whose context the Poller runs, so its own
	// spans and requests join it; and a span "lease <event>" of no
	// duration per lease event. Nil (the default) traces nothing and costs
	// nothing. The Coordinator never touches the global provider.
	TracerProvider trace.TracerProvider

	// tracing starts the spans; New makes it from TracerProvider (nil
	// when that is nil).
	tracing *tracing
	// auditPeriod replaces the constant auditPeriod when set (tests;
	// negative: no audit).
	auditPeriod time.Duration
}

// defaultTimes fills the zero durations.
func (c *Config) defaultTimes() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.LeaseTTL, DefaultLeaseTTL)
	// The defaults at DefaultLeaseTTL are the Default* constants.
	def(&c.RenewInterval, c.LeaseTTL/3)
	def(&c.HeartbeatInterval, c.LeaseTTL/3)
	def(&c.HeartbeatTTL, 3*c.HeartbeatInterval)
	def(&c.DiscoveryInterval, min(c.LeaseTTL/3, DefaultDiscoveryInterval))
	def(&c.OrphanGrace, 2*c.DiscoveryInterval)
	def(&c.DrainTimeout, DefaultDrainTimeout)
	def(&c.RequestTimeout, min(c.RenewInterval/2, 5*time.Second))
	def(&c.DriftMargin, lease.DefaultDriftMargin(c.LeaseTTL))
}

// WithDefaults returns c with its zero durations replaced by their
// defaults (those the Coordinator uses; most follow LeaseTTL), for a
// reader that shows the effective configuration. It validates nothing:
// New does.
func (c Config) WithDefaults() Config {
	c.defaultTimes()
	return c
}

// FailoverBound is how long, at most, a crashed worker's sessions wait
// for a new poller under c's timings (its zero ones taking their
// defaults, as WithDefaults fills them): until both its
// leases (LeaseTTL after its last renewal) and its heartbeat (HeartbeatTTL
// after its last one) have expired in Redis, when its peers take its
// sessions at once (they set a timer on each), plus one DiscoveryInterval
// in case that timer's round misses them and the next periodic round
// takes them. With only LeaseTTL set that is LeaseTTL + min(LeaseTTL/3,
// 10s): 40s with the defaults, 4s with LeaseTTL 3s. Redis must answer
// meanwhile; a session of a crashed worker that its peers cannot take
// (its selector matches none of them) waits for a worker that can.
func (c Config) FailoverBound() time.Duration {
	c.defaultTimes()
	return max(c.LeaseTTL, c.HeartbeatTTL) + c.DiscoveryInterval
}

// The zero rule of Config, everywhere (in Go and on pollworker run's
// command line): a setting left zero takes its default, and a setting
// that can be turned off (LossQuarantine, MaxPolls, MaxErrorBackoff,
// BalanceSlack) is turned off by a negative value, Off, which a flag
// spells "off".
const Off = -1
