package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
)

// Defaults of Config.
const (
	// DefaultTTL is the lease time to live when Config.TTL is zero.
	DefaultTTL = 15 * time.Second
)

// Errors returned by this package.
var (
	// ErrConfig is wrapped by every configuration error.
	ErrConfig = errors.New("election: invalid config")
	// ErrNotLeader is returned when an operation needs leadership this
	// candidate does not hold.
	ErrNotLeader = errors.New("election: not leader")
	// ErrNoCandidate is returned by TransferTo when the named candidate is
	// not live.
	ErrNoCandidate = errors.New("election: no such live candidate")
	// ErrRunning is returned by Run when the Elector is already running.
	ErrRunning = errors.New("election: already running")
)

// Client is the part of go-redis the elector uses; *redis.Client,
// *redis.ClusterClient, *redis.Ring and failover clients all satisfy it.
type Client interface {
	redis.Cmdable
}

// Config configures an Elector.
type Config struct {
	// Client is the Redis connection. Required.
	Client Client
	// Keys names the keys; the zero value uses the default prefixes.
	Keys keyspace.Space
	// Role names what is being led; "election:"+Role must pass
	// keyspace.ValidateID. Required.
	Role string
	// ID identifies this candidate among the candidates of Role; it must pass
	// keyspace.ValidateID. Default nodes.DefaultID().
	ID string
	// TTL is the lease time to live: how long a crashed leader blocks the
	// role. Default DefaultTTL (15s); at least 10ms.
	TTL time.Duration
	// LossQuarantine is how long no candidate is elected after Redis is
	// seen to have lost data (or restarted, or failed over), so that a
	// leader from before the loss has stepped down first; default TTL,
	// negative turns it off. A brand-new keyspace looks the same: call
	// lease.MarkFresh once on a new deployment. See lease.Config.
	LossQuarantine time.Duration
	// RenewInterval is the time between renewals of a held lease; default
	// TTL/3. It must be positive and at most TTL/2.
	RenewInterval time.Duration
	// RetryInterval is the time between campaigns of a candidate that is
	// not leader; default RenewInterval/2. It must be positive and at most TTL.
	RetryInterval time.Duration
	// ReleaseTimeout bounds the release of the lease when a term ends;
	// default RenewInterval.
	ReleaseTimeout time.Duration
	// Priority orders candidates: a live candidate of higher priority takes
	// over at the leader's next renewal (never mid-term). Default 0.
	Priority int
	// HealthCheck, if set, is called before each campaign and at each
	// renewal with a context bounded by RenewInterval/2. A leader whose
	// check fails resigns; a candidate whose check fails does not campaign.
	HealthCheck func(ctx context.Context) error
	// OnElected, if set, is called in its own goroutine when this candidate
	// becomes leader, with the term's fencing token. Its ctx is cancelled the
	// moment leadership ends; it must then return promptly: the lease is
	// released, and the next campaign starts, only after it returned.
	OnElected func(ctx context.Context, token int64)
	// OnDemoted, if set, is called after a term ended (lost, resigned or
	// stopped) and OnElected returned.
	OnDemoted func()
	// OnNewLeader, if set, is called when the observed leader changes
	// (including to this candidate), from the goroutine running Run.
	OnNewLeader func(id string)
	// Clock measures deadlines and intervals; default the real clock.
	Clock clock.WithTickerAndDelayedExecution
	// Logger receives election events; default no-op.
	Logger *zap.Logger
}

// validate fills in defaults and checks the rules.
func (c *Config) validate() error {
	if err := c.validateIdentity(); err != nil {
		return err
	}
	if err := c.validateTimings(); err != nil {
		return err
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}

// validateIdentity checks the client, the role and the candidate id, and
// defaults the id to the node's.
func (c *Config) validateIdentity() error {
	if c.Client == nil {
		return fmt.Errorf("%w: Client is required", ErrConfig)
	}
	if c.Role == "" {
		return fmt.Errorf("%w: Role is required", ErrConfig)
	}
	if err := keyspace.ValidateID(sessionOf(c.Role)); err != nil {
		return fmt.Errorf("%w: Role: %w", ErrConfig, err)
	}
	if c.ID == "" {
		c.ID = nodes.DefaultID()
	}
	if err := keyspace.ValidateID(c.ID); err != nil {
		return fmt.Errorf("%w: ID: %w", ErrConfig, err)
	}
	if err := c.Keys.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// validateTimings defaults and checks TTL, RenewInterval, RetryInterval and
// ReleaseTimeout, each default derived from the one before.
func (c *Config) validateTimings() error {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.TTL < 10*time.Millisecond {
		return fmt.Errorf("%w: TTL must be at least 10ms, got %v", ErrConfig, c.TTL)
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.TTL / 3
	}
	if c.RenewInterval <= 0 || c.RenewInterval > c.TTL/2 {
		return fmt.Errorf("%w: RenewInterval must be in (0, TTL/2], got %v with TTL %v", ErrConfig, c.RenewInterval, c.TTL)
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = c.RenewInterval / 2
	}
	if c.RetryInterval <= 0 || c.RetryInterval > c.TTL {
		return fmt.Errorf("%w: RetryInterval must be in (0, TTL], got %v with TTL %v", ErrConfig, c.RetryInterval, c.TTL)
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = c.RenewInterval
	}
	if c.ReleaseTimeout < 0 {
		return fmt.Errorf("%w: ReleaseTimeout must be positive, got %v", ErrConfig, c.ReleaseTimeout)
	}
	return nil
}

// sessionOf is the lease session id of a role.
func sessionOf(role string) string { return "election:" + role }

var _ lease.Client = Client(nil)
