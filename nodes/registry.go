package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/pollworker/pollworker/keyspace"
)

// DefaultTTL is how long a heartbeat keeps a worker live when Config.TTL is zero.
const DefaultTTL = 30 * time.Second

var (
	// ErrInvalidConfig is returned (wrapped) by New for a Config it rejects.
	ErrInvalidConfig = errors.New("nodes: invalid config")
	// ErrUnexpectedReply is returned (wrapped) when a script's reply does not
	// have the documented shape.
	ErrUnexpectedReply = errors.New("nodes: unexpected script reply")
)

// Config configures a Registry.
type Config struct {
	// Client reaches Redis: a *redis.Client, *redis.ClusterClient, a
	// Sentinel-backed client or anything else implementing redis.Cmdable.
	// Required.
	Client redis.Cmdable
	// Keys names the node keys; the zero value uses the default prefixes.
	Keys keyspace.Space
	// ID is this worker's node id; it must pass keyspace.ValidateID and be
	// unique among live workers. Default DefaultID().
	ID string
	// Version is the build version stored in Info; default empty.
	Version string
	// TTL is how long one heartbeat keeps the worker live; heartbeat well
	// within it (for example every TTL/3). Truncated to milliseconds; at
	// least 1ms. Default DefaultTTL (30s).
	TTL time.Duration
	// Incarnation tells this registry apart from every other process or
	// registry using the same ID: it is stored in Info, and a heartbeat
	// claims the ID only while no other incarnation does. It must pass
	// ValidateIncarnation. Default NewIncarnation(); set it only to share
	// one incarnation with other components of the same worker (for example
	// lease.Config.Incarnation, so that lease owners name it).
	Incarnation string
	// Logger receives membership changes and failures; default zap.NewNop().
	Logger *zap.Logger
	// Weight is this worker's capacity relative to its peers, stored in
	// Info and used by every planner; 0 means 1 (ValidateWeight).
	Weight float64
	// BalanceSlack is the load bound this worker plans with, stored in
	// Info (poller.Config.BalanceSlack); 0 says nothing. It must be finite.
	BalanceSlack float64
	// Labels are this worker's labels, stored in Info; a session whose
	// selector they do not match is never placed on it. Fixed for the
	// registry's life.
	Labels Labels
}

// Registry records this worker's heartbeats and observes its live peers. It
// starts no goroutines: the caller drives Heartbeat and Members. It is safe
// for concurrent use, but Membership.Version is only meaningful when one
// loop calls Members.
type Registry struct {
	client redis.Cmdable
	keys   keyspace.Space
	id     string
	ttl    time.Duration
	log    *zap.Logger
	reader *Reader // the read side, shared with status pages and tools

	claimed    atomic.Bool  // a heartbeat claimed the id at least once
	full       atomic.Bool  // the last heartbeat found Redis over maxmemory (OverMaxmemory)
	lastExpiry atomic.Int64 // index expiry (server ms) written by the last successful heartbeat

	valueMu sync.Mutex // guards info and value
	info    Info
	value   string // info as JSON, the heartbeat key's value

	mu           sync.Mutex
	version      uint64   // guarded by mu
	last         []string // guarded by mu; sorted ids of the last observation
	lastCordoned []string // guarded by mu; sorted cordoned ids of the last observation
}

// New validates cfg, fills in its defaults and returns a Registry. It does
// not touch Redis.
func New(cfg Config) (*Registry, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Client is required", ErrInvalidConfig)
	}
	if err := cfg.Keys.Validate(); err != nil {
		return nil, fmt.Errorf("%w: Keys: %w", ErrInvalidConfig, err)
	}
	if cfg.ID == "" {
		cfg.ID = DefaultID()
	}
	if err := keyspace.ValidateID(cfg.ID); err != nil {
		return nil, fmt.Errorf("%w: ID: %w", ErrInvalidConfig, err)
	}
	switch {
	case cfg.TTL == 0:
		cfg.TTL = DefaultTTL
	case cfg.TTL < time.Millisecond:
		return nil, fmt.Errorf("%w: TTL %v must be at least 1ms", ErrInvalidConfig, cfg.TTL)
	}
	cfg.TTL = cfg.TTL.Truncate(time.Millisecond)
	if cfg.Incarnation == "" {
		cfg.Incarnation = NewIncarnation()
	}
	if err := ValidateIncarnation(cfg.Incarnation); err != nil {
		return nil, fmt.Errorf("%w: Incarnation: %w", ErrInvalidConfig, err)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if err := ValidateWeight(cfg.Weight); err != nil {
		return nil, fmt.Errorf("%w: Weight: %w", ErrInvalidConfig, err)
	}
	if err := cfg.Labels.Validate(); err != nil {
		return nil, fmt.Errorf("%w: Labels: %w", ErrInvalidConfig, err)
	}
	if math.IsNaN(cfg.BalanceSlack) || math.IsInf(cfg.BalanceSlack, 0) {
		return nil, fmt.Errorf("%w: BalanceSlack %v must be finite", ErrInvalidConfig, cfg.BalanceSlack)
	}
	info := Info{BalanceSlack: cfg.BalanceSlack, ID: cfg.ID, Host: hostname(), PID: os.Getpid(), Started: processStart, Version: cfg.Version,
		Incarnation: cfg.Incarnation, TTLMs: cfg.TTL.Milliseconds(), Weight: cfg.Weight, Labels: maps.Clone(cfg.Labels),
		Sessions: cfg.Keys.SessionNamespace()}
	value, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("nodes: encode info: %w", err)
	}
	log := cfg.Logger.With(zap.String("node", cfg.ID))
	return &Registry{
		client: cfg.Client,
		keys:   cfg.Keys,
		id:     cfg.ID,
		ttl:    cfg.TTL,
		info:   info,
		value:  string(value),
		log:    log,
		reader: &Reader{client: cfg.Client, keys: cfg.Keys, log: log},
	}, nil
}

// ID is this worker's node id.
func (r *Registry) ID() string { return r.id }

// TTL is how long one heartbeat keeps this worker live.
func (r *Registry) TTL() time.Duration { return r.ttl }

// Info is what Heartbeat stores about this worker.
func (r *Registry) Info() Info {
	r.valueMu.Lock()
	defer r.valueMu.Unlock()
	return r.info
}

// Incarnation is this registry's incarnation (see Config.Incarnation).
func (r *Registry) Incarnation() string { return r.Info().Incarnation }

// SetWeight changes the weight this worker's Info carries (Config.Weight),
// from the next Heartbeat on; peers plan with it at their next full round.
// It refuses a weight ValidateWeight refuses. The Info key keeps naming
// this incarnation throughout: the claim and Leave compare incarnations,
// not whole values.
func (r *Registry) SetWeight(w float64) error {
	if err := ValidateWeight(w); err != nil {
		return fmt.Errorf("%w: Weight: %w", ErrInvalidConfig, err)
	}
	return r.update(func(i *Info) bool {
		changed := i.Weight != w
		i.Weight = w
		return changed
	})
}

// SetBehind sets what the next heartbeats say about the worker being
// behind (Info.Behind; "" when it keeps up).
func (r *Registry) SetBehind(why string) error {
	return r.update(func(i *Info) bool {
		changed := i.Behind != why
		i.Behind = why
		return changed
	})
}

// update applies change to the Info the next claims write and encodes it
// again when change reports that it changed something.
func (r *Registry) update(change func(*Info) bool) error {
	r.valueMu.Lock()
	defer r.valueMu.Unlock()
	info := r.info
	if !change(&info) {
		return nil
	}
	value, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("nodes: encode info: %w", err)
	}
	r.info, r.value = info, string(value)
	return nil
}

// current returns the Info and its JSON that the next claim writes.
func (r *Registry) current() (Info, string) {
	r.valueMu.Lock()
	defer r.valueMu.Unlock()
	return r.info, r.value
}

// Heartbeat claims this worker's id and marks it live for TTL from now (by
// the Redis server's clock), in two round trips: node_claim.lua sets the Info key
// only if it is absent or holds an Info of this incarnation, then node_heartbeat.lua
// moves the id's expiry in the index (and prunes expired members). The two
// keys are separate scripts so that each touches one key (Redis Cluster).
//
// If another incarnation holds the id, Heartbeat writes nothing and returns
// a *DuplicateIDError (errors.Is ErrDuplicateID): either a second process
// runs with the same id, or, when DuplicateIDError.TakenOver is set, this
// process stopped heartbeating for longer than TTL and another took the id.
// That error is final: the caller must stop working as this id.
//
// When Redis refuses the claim because it is over maxmemory (noeviction),
// Heartbeat renews instead: it moves the expiry of the Info key this
// incarnation holds (PEXPIRE, which Redis runs even then) and its entry
// in the index, writing nothing new, so a member stays live, with the Info
// it last wrote, for as long as the pressure lasts, while a worker that
// was not a member cannot join. OverMaxmemory then reports true.
func (r *Registry) Heartbeat(ctx context.Context) error {
	err := r.claim(ctx, false)
	full := isOutOfMemory(err)
	r.full.Store(full)
	if full {
		if rerr := r.claim(ctx, true); rerr != errClaimAbsent {
			err = rerr
		}
	}
	if err != nil {
		var dup *DuplicateIDError
		if errors.As(err, &dup) {
			return err
		}
		return fmt.Errorf("heartbeat %s: claim: %w", r.id, wrongTypeOf(err, r.keys.Node(r.id)))
	}
	r.claimed.Store(true)
	now, err := heartbeatScript.Run(ctx, r.client, []string{r.keys.NodeIndex()}, r.id, r.ttl.Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("heartbeat %s: %w", r.id, wrongTypeOf(err, r.keys.NodeIndex()))
	}
	r.lastExpiry.Store(now + r.ttl.Milliseconds())
	return nil
}

// OverMaxmemory reports whether the last Heartbeat found Redis refusing
// writes that allocate (over maxmemory with noeviction): nobody can
// acquire a lease or join then, while renewals (PEXPIRE) still pass.
func (r *Registry) OverMaxmemory() bool { return r.full.Load() }

// errClaimAbsent is claim's answer in renew mode when this worker has no
// Info key to renew.
var errClaimAbsent = errors.New("nodes: no Info key to renew")

// isOutOfMemory reports whether err is Redis refusing a write because it
// is over maxmemory (noeviction): "OOM command not allowed ...".
func isOutOfMemory(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "OOM ")
}

// Members returns the live members, read with one script call on the
// node index (Reader.Members), numbered by Version.
func (r *Registry) Members(ctx context.Context) (Membership, error) {
	m, err := r.reader.Members(ctx)
	if err != nil {
		return Membership{}, err
	}
	m.Version = r.observe(m.Nodes, m.Cordoned)
	return m, nil
}

// observe records ids as the latest observation and returns its version,
// bumping it when ids or the cordoned among them differ from the previous
// observation.
func (r *Registry) observe(ids, cordoned []string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.version > 0 && slices.Equal(ids, r.last) && slices.Equal(cordoned, r.lastCordoned) {
		return r.version
	}
	joined, left := diff(r.last, ids)
	r.version++
	r.last = slices.Clone(ids)
	r.lastCordoned = slices.Clone(cordoned)
	r.log.Info("membership changed",
		zap.Uint64("version", r.version),
		zap.Int("members", len(ids)),
		zap.Strings("joined", joined),
		zap.Strings("left", left),
		zap.Strings("cordoned", cordoned))
	return r.version
}

// diff returns the ids only in after (joined) and only in before (left);
// both inputs are sorted.
func diff(before, after []string) (joined, left []string) {
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j == len(after) || (i < len(before) && before[i] < after[j]):
			left = append(left, before[i])
			i++
		case i == len(before) || after[j] < before[i]:
			joined = append(joined, after[j])
			j++
		default:
			i++
			j++
		}
	}
	return joined, left
}

// parseMembers decodes node_members.lua's reply
// {server time ms, id1, expiry1 ms, id2, expiry2 ms, ...}.
func parseMembers(reply []any) (Membership, error) {
	if len(reply) == 0 || len(reply)%2 != 1 {
		return Membership{}, fmt.Errorf("%w: %d elements", ErrUnexpectedReply, len(reply))
	}
	now, err := toInt64(reply[0])
	if err != nil {
		return Membership{}, fmt.Errorf("%w: server time: %w", ErrUnexpectedReply, err)
	}
	type member struct {
		id     string
		expiry int64
	}
	members := make([]member, 0, len(reply)/2)
	for i := 1; i < len(reply); i += 2 {
		id, ok := reply[i].(string)
		if !ok {
			return Membership{}, fmt.Errorf("%w: id is %T", ErrUnexpectedReply, reply[i])
		}
		expiry, err := toInt64(reply[i+1])
		if err != nil {
			return Membership{}, fmt.Errorf("%w: expiry of %s: %w", ErrUnexpectedReply, id, err)
		}
		members = append(members, member{id, expiry})
	}
	slices.SortFunc(members, func(a, b member) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	m := Membership{
		Nodes:        make([]string, len(members)),
		ExpiryMs:     make([]int64, len(members)),
		ServerTimeMs: now,
	}
	for i, mb := range members {
		m.Nodes[i], m.ExpiryMs[i] = mb.id, mb.expiry
	}
	return m, nil
}

func toInt64(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		f, err := strconv.ParseFloat(v, 64)
		return int64(f), err
	}
	return 0, fmt.Errorf("%T is not a number", v)
}

// Leave deletes this worker's Info and its entry in the index, so peers see
// it gone at their next Members call, but only what this incarnation wrote:
// the Info key only if it holds this incarnation's Info (unclaim.lua), the
// index entry only if no later heartbeat of another incarnation moved it
// (leave.lua). If another incarnation holds the id, Leave removes nothing
// and returns nil (this worker is not a member either way). Call it on
// graceful shutdown, after the heartbeat loop has stopped (a heartbeat
// racing with Leave re-adds the worker), with a fresh, bounded context.
func (r *Registry) Leave(ctx context.Context) error {
	n, err := unclaimScript.Run(ctx, r.client, []string{r.keys.Node(r.id)}, r.Incarnation()).Int64()
	if err != nil {
		return fmt.Errorf("leave %s: %w", r.id, err)
	}
	if n < 0 {
		r.log.Warn("not leaving: another incarnation holds this id")
		return nil
	}
	if last := r.lastExpiry.Load(); last > 0 {
		if err := leaveScript.Run(ctx, r.client, []string{r.keys.NodeIndex()}, r.id, last).Err(); err != nil {
			return fmt.Errorf("leave %s: %w", r.id, err)
		}
	}
	r.log.Info("left")
	return nil
}

// Get reads the Info of the given nodes (Reader.Get).
func (r *Registry) Get(ctx context.Context, ids ...string) ([]Info, error) {
	return r.reader.Get(ctx, ids...)
}
