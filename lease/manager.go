package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/scripts/lua"
)

// Defaults of Config.
const (
	DefaultTTL       = 30 * time.Second
	DefaultBatchSize = 500
)

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("lease: invalid config")

// ErrNotReplicated is wrapped by the error of an acquisition or renewal
// that fewer than Config.WaitReplicas replicas acknowledged: its outcome
// counts as unknown (an acquisition is not Held, a renewal leaves the lease
// Uncertain), never as ownership.
var ErrNotReplicated = errors.New("lease: not replicated")

// Client is the part of go-redis the manager uses; *redis.Client,
// *redis.ClusterClient, *redis.Ring and failover clients all satisfy it.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// Config configures a Manager.
type Config struct {
	// Client is the Redis connection. Required.
	Client Client
	// Keys names the keys; the zero value uses the default prefixes.
	Keys keyspace.Space
	// Holder identifies this worker; it starts every owner value. Required.
	Holder string
	// Incarnation, if set, tells this run of the worker from earlier and
	// later ones with the same Holder: it is written into every owner
	// value (see Owner), so that a reader (pollworker status) can tell a
	// lease held by the live process from one a crashed predecessor still
	// holds. Pass the node registry's incarnation. Letters and digits, at
	// most 64; default none (owner values "<holder>#<16 hex>").
	Incarnation string
	// TTL is the lease time to live; default 30s.
	TTL time.Duration
	// DriftMargin is taken off every local deadline; default TTL/100 + 2ms.
	// It must be less than TTL/2.
	DriftMargin time.Duration
	// LossQuarantine is how long no free lease is taken in a hash slot
	// after Redis is seen to have lost data there (its loss marker is gone,
	// or was written by another server: a restart or failover), so that
	// every lease granted before the loss has ended at its holder first.
	// Default TTL; negative turns the quarantine off (a loss is still
	// recorded). See the package doc.
	LossQuarantine time.Duration
	// WaitReplicas, if positive, makes every acquisition and renewal count
	// only once WAIT confirms that this many replicas have its writes, so
	// that a failover to a caught-up replica loses no lease. A WAIT that
	// falls short (or fails) is read as an unknown outcome: the
	// acquisition is not Held (a later Acquire retries it with the same
	// owner value), the renewal leaves the lease Uncertain. Default 0 (no
	// WAIT). Not for Redis Cluster (WAIT would reach one shard only).
	WaitReplicas int
	// WaitTimeout bounds each WAIT; default TTL/10.
	WaitTimeout time.Duration
	// BatchSize is the number of sessions per script call; default 500.
	// It bounds how long one call blocks Redis (renew: ~0.7 ms per 500
	// sessions, BenchmarkScriptRenew500).
	BatchSize int
	// MinRenewAge, if positive, makes RenewAll skip a Held lease whose
	// acquisition or last renewal was sent less than MinRenewAge ago:
	// renewing it would only move a deadline that is still nearly a TTL
	// away. A caller renewing every interval I with TTL ≥ 3I sets I/2,
	// which still renews each lease at least twice before its deadline
	// (the first time within 1.5I of the request that set it), and saves
	// the renewal of leases taken just before a cycle: at a cold start
	// or a handoff wave, about a third of the renewals. Uncertain leases
	// are always renewed. Default 0 (every lease at every call); it must
	// be less than TTL/2.
	MinRenewAge time.Duration
	// Clock measures deadlines; default the real (monotonic) clock.
	Clock clock.WithTickerAndDelayedExecution
	// Logger receives lease events; default no-op.
	Logger *zap.Logger
	// OnChange, if set, is called after every state change of a lease,
	// outside any lock, in the goroutine that made the change.
	OnChange func(l *Lease, from, to State)
}

// Manager acquires, renews and releases the leases of one holder.
// It starts no goroutines of its own (deadline timers aside); the caller
// drives renewal by calling RenewAll on a ticker.
type Manager struct {
	transport               // batching and pipelining, shared with reader
	reader                  *Reader
	cfg                     Config
	acquire, renew, release *redis.Script
	log                     *zap.Logger

	ttlArg        any       // TTL in ms, boxed once
	quarantineArg any       // LossQuarantine in ms (0 when off), boxed once
	argsPool      sync.Pool // of *[]any: renew command lines, reused across cycles

	mu      sync.Mutex
	held    map[string]*Lease // Held or Uncertain
	list    []*Lease          // the leases of held in acquisition order (Lease.slot), for cache-friendly cycles
	pending map[string]string // session -> owner value of an acquire whose reply was lost
	stale   []*Lease          // lost locally but maybe still ours in Redis: release when next possible

	quarantinedUntil time.Time          // end of the last quarantine logged (noteQuarantine)
	bad              map[string]*BadKey // sessions skipped for a bad key, each logged once
	markerRepairs    int                // loss markers of the wrong type overwritten

	summaries summaries // summary lines of lease changes, a window per message (logSummary)
}

// New validates cfg and returns a Manager.
func New(cfg Config) (*Manager, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := newTransport(cfg.Client, cfg.Keys, cfg.BatchSize, cfg.Clock)
	t.waitReplicas, t.waitTimeout = cfg.WaitReplicas, cfg.WaitTimeout
	return &Manager{
		transport:     t,
		reader:        newReader(t),
		cfg:           cfg,
		acquire:       redis.NewScript(lua.Acquire),
		renew:         redis.NewScript(lua.Renew),
		release:       redis.NewScript(lua.Release),
		ttlArg:        cfg.TTL.Milliseconds(),
		quarantineArg: max(cfg.LossQuarantine.Milliseconds(), 0),
		log:           cfg.Logger.With(zap.String("instance", cfg.Holder)),
		held:          make(map[string]*Lease),
		pending:       make(map[string]string),
		bad:           make(map[string]*BadKey),
	}, nil
}

// withDefaults fills zero fields and validates; errors name the rule.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Client == nil {
		return cfg, fmt.Errorf("%w: Client is required", ErrConfig)
	}
	if err := keyspace.ValidateID(cfg.Holder); err != nil {
		return cfg, fmt.Errorf("%w: Holder: %w", ErrConfig, err)
	}
	if err := cfg.Keys.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := validateIncarnation(cfg.Incarnation); err != nil {
		return cfg, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.TTL, DefaultTTL)
	def(&cfg.DriftMargin, DefaultDriftMargin(cfg.TTL))
	def(&cfg.LossQuarantine, cfg.TTL)
	def(&cfg.WaitTimeout, cfg.TTL/10)
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return cfg, cfg.validate()
}

// validate checks the rules between the (defaulted) fields.
func (cfg Config) validate() error {
	_, cluster := cfg.Client.(*redis.ClusterClient)
	switch {
	case cfg.TTL < 10*time.Millisecond:
		return fmt.Errorf("%w: TTL must be at least 10ms, got %v", ErrConfig, cfg.TTL)
	case cfg.DriftMargin < 0 || cfg.DriftMargin >= cfg.TTL/2:
		return fmt.Errorf("%w: DriftMargin must be in [0, TTL/2), got %v with TTL %v", ErrConfig, cfg.DriftMargin, cfg.TTL)
	case cfg.WaitReplicas < 0:
		return fmt.Errorf("%w: WaitReplicas must not be negative, got %d", ErrConfig, cfg.WaitReplicas)
	case cfg.WaitTimeout < 0 || cfg.WaitTimeout >= cfg.TTL/2:
		return fmt.Errorf("%w: WaitTimeout must be in (0, TTL/2), got %v with TTL %v", ErrConfig, cfg.WaitTimeout, cfg.TTL)
	case cfg.BatchSize < 1:
		return fmt.Errorf("%w: BatchSize must be positive, got %d", ErrConfig, cfg.BatchSize)
	case cfg.MinRenewAge < 0 || cfg.MinRenewAge >= cfg.TTL/2:
		return fmt.Errorf("%w: MinRenewAge must be in [0, TTL/2), got %v with TTL %v", ErrConfig, cfg.MinRenewAge, cfg.TTL)
	case cluster && cfg.WaitReplicas > 0:
		return fmt.Errorf("%w: WaitReplicas is not supported with Redis Cluster (WAIT reaches one shard)", ErrConfig)
	}
	return nil
}

// DefaultDriftMargin is TTL/100 + 2ms, the margin Redlock uses.
func DefaultDriftMargin(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// TTL is the configured lease time to live.
func (m *Manager) TTL() time.Duration { return m.cfg.TTL }

// Get returns the Held or Uncertain lease of session, or nil.
func (m *Manager) Get(session string) *Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held[session]
}

// Held returns every Held or Uncertain lease, sorted by session.
func (m *Manager) Held() []*Lease {
	out := m.snapshot()
	sort.Slice(out, func(i, j int) bool { return out[i].session < out[j].session })
	return out
}

// snapshot returns every Held or Uncertain lease, roughly in acquisition
// order: walking them in the order they were allocated is much kinder to
// the CPU caches than a map's random order when there are 100,000.
func (m *Manager) snapshot() []*Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*Lease(nil), m.list...)
}

// Count is the number of Held or Uncertain leases.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.held)
}

// Result is the outcome of acquiring one session.
type Result struct {
	// Session is the session asked for.
	Session string
	// Lease is set when the lease is ours (new, or already held).
	Lease *Lease
	// Remaining is the other holder's remaining TTL when Lease is nil and
	// Err is nil (-1 when the key has no expiry).
	Remaining time.Duration
	// Holder is the holder id of that other holder (see HolderOf), so that
	// a caller can try again when that holder announces a release.
	Holder string
	// Quarantined is set when the lease is free but Redis lost data in its
	// hash slot less than LossQuarantine ago: nobody may take it for
	// Remaining more.
	Quarantined bool
	// Bad is set when a key of the session cannot be used (BadKey): the
	// session is skipped, nothing of it was written, and Lease is nil. It
	// is logged once per session (Manager.BadKeys lists them).
	Bad *BadKey
	// Err is set when the outcome is unknown (the request failed); the lease
	// is then not ours, and a later Acquire retries with the same owner value.
	Err error
}

// Acquire tries to take the leases of sessions, in one pipeline of script
// calls. Sessions already held return their lease; an Uncertain one is
// returned as is.
func (m *Manager) Acquire(ctx context.Context, sessions []string) []Result {
	results := make([]Result, len(sessions))
	var todo []int
	owners := make([]string, len(sessions))
	made := m.cfg.Clock.Now() // read outside m.mu: a fake clock runs its callbacks under its own lock
	fresh := ""               // the owner value of every session acquired anew by this call
	m.mu.Lock()
	for i, s := range sessions {
		results[i].Session = s
		if l, ok := m.held[s]; ok {
			results[i].Lease = l
			continue
		}
		if err := keyspace.ValidateID(s); err != nil {
			results[i].Err = err
			continue
		}
		owner, ok := m.pending[s]
		if !ok {
			if fresh == "" {
				fresh = m.newOwner(made)
			}
			owner = fresh
			m.pending[s] = owner
		}
		owners[i] = owner
		todo = append(todo, i)
	}
	m.mu.Unlock()
	if len(todo) == 0 {
		return results
	}

	var calls []*call
	for _, b := range m.batches(todo, sessions) {
		calls = append(calls, &call{idx: b, args: m.acquireArgs(b, sessions, owners)})
	}

	var mu sync.Mutex // guards changes and moved
	var changes []change
	var moved []*call // asked for the masters: sent again with them
	handle := func(done []*call, now time.Time) {
		for _, c := range done {
			if c.asksMasters() {
				mu.Lock()
				moved = append(moved, c)
				mu.Unlock()
				continue
			}
			ch := m.acquired(c, sessions, owners, results, now)
			mu.Lock()
			changes = append(changes, ch...)
			mu.Unlock()
		}
	}
	m.send(ctx, m.acquire, calls, 1, true, handle)
	if len(moved) > 0 {
		masters, complete := m.settledMasters(ctx)
		if !complete {
			// Nothing was written: the sessions are not taken now, and
			// the caller asks again (an error result).
			for _, c := range moved {
				c.cmd, c.err = nil, errMastersUnread
			}
			handle(moved, m.cfg.Clock.Now())
		} else {
			for _, c := range moved {
				c.withMasters(masters)
			}
			m.send(ctx, m.acquire, moved, 1, true, handle) // never asks again
		}
	}
	m.notify(changes)
	if n := countTaken(changes); n > 0 {
		// One line per call, each lease at debug: a worker taking its share
		// of a million sessions would otherwise log a line per session.
		m.log.Info("leases acquired", zap.Int("leases", n), zap.String("event", "acquired"), zap.Duration("ttl", m.cfg.TTL))
	}
	return results
}

// countTaken is the number of leases changes opened (Held from none).
func countTaken(changes []change) int {
	n := 0
	for _, ch := range changes {
		if ch.from == 0 && ch.to == Held {
			n++
		}
	}
	return n
}

// acquireArgs is the command line of one acquire call for the sessions
// at positions b, with their owner values. It orders b by owner value:
// the script takes each value once, with the number of sessions it is for
// (one value for the whole call, but for sessions retried with the value
// of an earlier call whose reply was lost). Under Redis Cluster it passes
// the loss marker's confirmation time and '-', so that a marker moved by a
// slot migration is told from a loss (acquire.lua, settledMasters).
func (m *Manager) acquireArgs(b []int, sessions, owners []string) []any {
	slices.SortStableFunc(b, func(x, y int) int { return strings.Compare(owners[x], owners[y]) })
	slot := m.epochSlot(sessions[b[0]])
	numKeys := 2*len(b) + 2
	if m.cluster {
		numKeys++
	}
	args := evalsha(m.acquire, numKeys, numKeys+5)
	for _, i := range b {
		s := sessions[i]
		args = append(args, m.cfg.Keys.Lease(s), m.cfg.Keys.Fencing(s))
	}
	args = append(args, m.cfg.Keys.Epoch(slot), m.cfg.Keys.EpochTokens(slot))
	masters := ""
	if m.cluster {
		args = append(args, m.cfg.Keys.EpochConfirmed(slot))
		masters = "-"
	}
	args = append(args, m.ttlArg, m.quarantineArg, masters)
	return appendOwnerRuns(args, len(b), func(j int) string { return owners[b[j]] })
}

// appendOwnerRuns appends the owner values of n items (ownerOf(j) for j in
// [0, n)) as the scripts take them: each run of equal values as the value
// and the length of the run.
func appendOwnerRuns(args []any, n int, ownerOf func(int) string) []any {
	for j := 0; j < n; {
		o, k := ownerOf(j), j+1
		for k < n && ownerOf(k) == o {
			k++
		}
		args = append(args, o, k-j)
		j = k
	}
	return args
}

// epochSlot is the hash slot whose loss marker guards the acquisition of
// session: its lease's slot in Redis Cluster (a call's keys share one
// slot), else slot 0 for every lease.
func (m *Manager) epochSlot(session string) uint16 {
	if !m.cluster {
		return 0
	}
	return keyspace.Slot(m.cfg.Keys.Lease(session))
}

// acquired applies the reply of one acquire call, received by now, to
// results.
func (m *Manager) acquired(c *call, sessions, owners []string, results []Result, now time.Time) []change {
	vals, held, marker, err := acquireReply(c, len(c.idx))
	if marker != "" {
		m.noteBadMarker(c, marker)
	}
	g := newGroup(c.sent.Add(m.cfg.TTL-m.cfg.DriftMargin), len(c.idx))
	defer m.seal(g, now)
	if err != nil {
		m.log.Warn("lease acquire uncertain: the request failed, its sessions are asked for again later",
			zap.Int("sessions", len(c.idx)), zap.String("first", sessions[c.idx[0]]), zap.String("event", "acquire_error"), zap.Error(err))
	}
	var changes []change
	for j, i := range c.idx {
		s := sessions[i]
		if err != nil {
			results[i].Err = fmt.Errorf("acquire %s: %w", s, err)
			continue
		}
		token, remaining, gap, due := vals[4*j], vals[4*j+1], vals[4*j+2], vals[4*j+3]
		if role, ok := badRole(held[j]); ok {
			results[i].Bad = m.noteBad(newBadKey(m.cfg.Keys, s, role, held[len(c.idx)+j]))
			continue
		}
		if token <= 0 {
			if held[j] == quarantineMark {
				results[i].Quarantined = true
				m.noteQuarantine(time.Duration(remaining) * time.Millisecond)
			} else {
				results[i].Holder = HolderOf(held[j])
			}
			results[i].Remaining = time.Duration(remaining) * time.Millisecond
			if remaining < 0 {
				results[i].Remaining = time.Duration(remaining)
			}
			m.mu.Lock()
			delete(m.pending, s) // someone else holds it: our value never landed
			m.mu.Unlock()
			continue
		}
		m.noteGood(s)
		m.noteQuarantineOver()
		l, ch := m.adopt(s, owners[i], token, time.Duration(gap)*time.Millisecond, time.Duration(due)*time.Millisecond, g, now)
		results[i].Lease = l
		changes = append(changes, ch...)
	}
	return changes
}

// quarantineMark stands in the holder's place of a quarantined session in
// acquire.lua's reply.
const quarantineMark = "<quarantine>"

// noteQuarantine logs, once per quarantine, that acquisitions wait: the
// loss marker was missing or another server's, which is either a new
// keyspace or a data loss (from inside Redis the two look the same).
func (m *Manager) noteQuarantine(left time.Duration) {
	until := m.cfg.Clock.Now().Add(left)
	m.mu.Lock()
	logged := until.Before(m.quarantinedUntil.Add(time.Second))
	if !logged {
		m.quarantinedUntil = until
	}
	m.mu.Unlock()
	if !logged {
		m.log.Warn("loss quarantine: no free lease is taken until it ends, because the keyspace is new or Redis lost data "+
			"(restarted, failed over, flushed) and every lease granted before must end first; "+
			"`pollworker init` (lease.InitKeyspace) declares a new keyspace fresh before its first worker starts",
			zap.Duration("quarantine left", left), zap.String("event", "quarantine"))
	}
}

// noteQuarantineOver logs, once, that the quarantine noteQuarantine logged
// is over, at the first lease taken after its end.
func (m *Manager) noteQuarantineOver() {
	m.mu.Lock()
	until := m.quarantinedUntil
	over := !until.IsZero() && !m.cfg.Clock.Now().Add(time.Second).Before(until)
	if over {
		m.quarantinedUntil = time.Time{}
	}
	m.mu.Unlock()
	if over {
		m.log.Info("loss quarantine over: free leases are taken again", zap.String("event", "quarantine_over"))
	}
}

// acquireReply parses the reply of one acquire call for n sessions: four
// integers per session, except that a lease held by another owner value
// has that value (a string) in its third place, returned in held[j]; a bad
// key has "<bad:ROLE>" there and its problem (a string) in the fourth
// place, returned in held[n+j]. marker is the problem of a loss marker of
// the wrong type (the two values after the sessions'), "" if none.
func acquireReply(c *call, n int) (vals []int64, held []string, marker string, err error) {
	if c.err != nil {
		return nil, nil, "", c.err
	}
	raw, err := c.cmd.Slice()
	if err != nil {
		return nil, nil, "", err
	}
	for len(raw) >= 4*n+2 { // reports of the slot's own keys, in pairs
		what, _ := raw[len(raw)-2].(string)
		problem, _ := raw[len(raw)-1].(string)
		switch what {
		case badPrefix + "marker>":
			marker = joinProblems("loss marker: "+problem, marker)
		case badPrefix + "high>":
			marker = joinProblems("token high-water mark: "+problem, marker)
		default:
			return nil, nil, "", fmt.Errorf("script reply has %d values, want %d", len(raw), 4*n)
		}
		raw = raw[:len(raw)-2]
	}
	if len(raw) != 4*n {
		return nil, nil, "", fmt.Errorf("script reply has %d values, want %d", len(raw), 4*n)
	}
	vals = make([]int64, len(raw))
	held = make([]string, 2*n)
	for k, v := range raw {
		switch v := v.(type) {
		case int64:
			vals[k] = v
		case string:
			_, bad := badRole(held[k/4])
			switch {
			case k%4 == 2:
				held[k/4] = v
			case k%4 == 3 && bad:
				held[n+k/4] = v
			default:
				return nil, nil, "", fmt.Errorf("script reply value %d is a string, want an integer", k)
			}
		default:
			return nil, nil, "", fmt.Errorf("script reply value %d has type %T", k, v)
		}
	}
	return vals, held, marker, nil
}

// joinProblems joins two reports, the second possibly empty.
func joinProblems(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}

// adopt records a successful acquisition whose reply arrived by now; its
// deadline is g's, counted from the time the request was sent. g is unsealed
// and owned by the caller. gap is the handoff gap, negative if none; due is
// the wait until the previous holder's next poll, negative if unknown.
func (m *Manager) adopt(session, owner string, token int64, gap, due time.Duration, g *expiryGroup, now time.Time) (*Lease, []change) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pending, session)
	if l, ok := m.held[session]; ok { // acquired twice in parallel calls
		return l, nil
	}
	key := m.cfg.Keys.Lease(session)
	if gap < 0 {
		gap = -1
	}
	if due < 0 {
		due = -1
	}
	l := &Lease{session: session, token: token, keyArg: key, ownerArg: owner,
		gap: gap, acquired: now, nextPollIn: due,
		deadline: g.deadline, reason: "acquiring"}
	if !now.Before(g.deadline) {
		// The reply came too late to use; the key expires by itself (or a
		// later release drops it).
		l.state = Lost
		l.reason = "acquired past deadline"
		m.stale = append(m.stale, l)
		return l, []change{{l, 0, Lost}}
	}
	l.state = Uncertain // setLocked(Held) below opens the term
	l.setLocked(Held, "")
	l.joinLocked(g)
	m.held[session] = l
	l.slot = len(m.list)
	m.list = append(m.list, l)
	if ce := m.log.Check(zapcore.DebugLevel, "lease acquired"); ce != nil { // no fields built per lease unless logged
		ce.Write(zap.String("session", session), zap.String("event", "acquired"),
			zap.Duration("ttl", m.cfg.TTL), zap.Int64("token", token))
	}
	return l, []change{{l, 0, Held}}
}

// forget takes l out of the leases the manager holds.
func (m *Manager) forget(l *Lease) {
	m.mu.Lock()
	if m.held[l.session] == l {
		delete(m.held, l.session)
		last := m.list[len(m.list)-1]
		m.list[l.slot], last.slot = last, l.slot
		m.list[len(m.list)-1] = nil
		m.list = m.list[:len(m.list)-1]
	}
	m.mu.Unlock()
}

// dropStale deletes, where they still hold our owner value, the keys of
// leases that were given up locally after Redis had extended them.
func (m *Manager) dropStale(ctx context.Context) {
	m.mu.Lock()
	stale := m.stale
	m.stale = nil
	m.mu.Unlock()
	if len(stale) == 0 {
		return
	}
	// Best effort: if this fails the keys expire by their TTL.
	_ = m.Release(ctx, stale...)
}

// Release gives up leases: each is Released locally at once (its term
// ends), then deleted in Redis only if it is still this acquisition's
// (release.lua). The successor's acquisition finds no poll schedule; use
// HandOff to pass one on. An error means some deletions are unconfirmed:
// those leases expire by their TTL.
func (m *Manager) Release(ctx context.Context, leases ...*Lease) error {
	hs := make([]Handoff, len(leases))
	for i, l := range leases {
		hs[i].Lease = l
	}
	return m.HandOff(ctx, hs...)
}

// Handoff is a lease to release and when its session's next poll is due.
type Handoff struct {
	// Lease is the lease to release.
	Lease *Lease
	// NextPoll is when the session's next poll is due on the releasing
	// worker's schedule (its clock); zero when unknown. The successor's
	// Lease.NextPoll reports it, converted through the Redis server's
	// clock, so that a handoff keeps the session's interval.
	NextPoll time.Time
}

// HandOff is Release that also records, in each lease's handoff mark, when
// the session's next poll is due, for the successor (Lease.NextPoll).
func (m *Manager) HandOff(ctx context.Context, hs ...Handoff) error {
	todo := m.markReleased(hs)
	if len(todo) == 0 {
		return nil
	}
	calls := m.releaseCalls(todo)
	m.send(ctx, m.release, calls, 1, false, func([]*call, time.Time) {})
	var errs []error
	var gone []*Lease // not ours any more: missing, or another owner's
	released := 0
	for _, c := range calls {
		if c.err != nil {
			errs = append(errs, c.err)
			continue
		}
		if deleted, err := c.cmd.Int64Slice(); err == nil {
			for j, d := range deleted {
				if d == 0 && j < len(c.idx) {
					gone = append(gone, todo[c.idx[j]].Lease)
				}
			}
		}
		if m.log.Core().Enabled(zapcore.DebugLevel) {
			for _, i := range c.idx {
				l := todo[i].Lease
				m.log.Debug("lease released", zap.String("session", l.session), zap.String("event", "released"), zap.Int64("token", l.token))
			}
		}
		released += len(c.idx)
	}
	if released > 0 {
		m.log.Info("leases released", zap.Int("leases", released), zap.String("event", "released"))
	}
	m.probeLoss(ctx, gone)
	if len(errs) > 0 {
		return fmt.Errorf("release: %w", errors.Join(errs...))
	}
	return nil
}

// markReleased makes each lease of hs Released locally (OnChange is
// called for those that were not already) and forgets it, and returns
// the handoffs with a lease.
func (m *Manager) markReleased(hs []Handoff) []Handoff {
	var changes []change
	var todo []Handoff
	for _, h := range hs {
		l := h.Lease
		if l == nil {
			continue
		}
		l.mu.Lock()
		from := l.state
		moved := l.setLocked(Released, "released")
		l.mu.Unlock()
		m.forget(l)
		todo = append(todo, h)
		if moved {
			changes = append(changes, change{l, from, Released})
		}
	}
	m.notify(changes)
	return todo
}

// releaseCalls are the release script calls of todo, batched as the
// manager batches (one slot per call under Redis Cluster).
func (m *Manager) releaseCalls(todo []Handoff) []*call {
	idx := make([]int, len(todo))
	names := make([]string, len(todo))
	for i, h := range todo {
		idx[i], names[i] = i, h.Lease.session
	}
	now := m.cfg.Clock.Now()
	var calls []*call
	for _, b := range m.batches(idx, names) {
		args := evalsha(m.release, 2*len(b), 5*len(b)+1)
		for _, i := range b {
			l := todo[i].Lease
			args = append(args, l.keyArg, m.cfg.Keys.Fencing(l.session))
		}
		args = append(args, m.ttlArg) // the handoff mark lives one TTL
		for _, i := range b {
			args = append(args, todo[i].Lease.ownerArg)
		}
		for _, i := range b {
			args = append(args, dueIn(todo[i].NextPoll, now))
		}
		for _, i := range b {
			args = append(args, todo[i].Lease.token) // the mark counts while it is the record's
		}
		calls = append(calls, &call{idx: b, args: args})
	}
	return calls
}

// dueIn is how many milliseconds after now next is (0 when past), -1 for
// a zero next (unknown).
func dueIn(next, now time.Time) int64 {
	if next.IsZero() {
		return -1
	}
	return max(next.Sub(now).Milliseconds(), 0)
}

// Abandon gives leases up locally without asking Redis: each Held or
// Uncertain one becomes Lost ("abandoned") at once, its deadline timer is
// stopped and OnChange is called before Abandon returns, so that nothing of
// the manager fires for it afterwards. Its key expires in Redis by its TTL.
// It is for a holder that stops while a lease cannot be released (its poll
// has not returned).
func (m *Manager) Abandon(leases ...*Lease) {
	var changes []change
	for _, l := range leases {
		if l == nil {
			continue
		}
		l.mu.Lock()
		from := l.state
		if from != Held && from != Uncertain {
			l.mu.Unlock()
			continue
		}
		m.forget(l)
		l.setLocked(Lost, "abandoned")
		l.mu.Unlock()
		m.log.Warn("lease abandoned: it expires by its TTL", zap.String("session", l.session),
			zap.String("event", "lost"), zap.Int64("token", l.token))
		changes = append(changes, change{l, from, Lost})
	}
	m.notify(changes)
}

// NotHeld makes l Lost at once (its context cancelled) on proof that its
// key in Redis holds another owner value or none: the reply of a script
// that read the key atomically with a write fenced by l (state.ErrNotHeld),
// as a renewal would find it at its next cycle. The loss is then probed
// as a renewal's is (a data loss starts the quarantine). Never call it on
// an error, which proves nothing either way. It reports whether l was
// Held or Uncertain.
func (m *Manager) NotHeld(ctx context.Context, l *Lease, reason string) bool {
	ch, ok := m.transition(l, Lost, reason)
	if !ok {
		return false
	}
	m.forget(l)
	changes := []change{ch}
	m.logSummary(changes, Lost, zapcore.WarnLevel, "leases lost: held by another owner value, or missing", "lost")
	m.notify(changes)
	m.probeLoss(ctx, []*Lease{l})
	return true
}

// ReleaseAll releases every lease the manager holds.
func (m *Manager) ReleaseAll(ctx context.Context) error {
	return m.Release(ctx, m.Held()...)
}

// Holding describes a lease as Redis sees it.
type Holding struct {
	// Session is the session id.
	Session string
	// Owner is the owner value, "" when nobody holds it.
	Owner string
	// Remaining is the key's TTL: 0 when nobody holds it, -1 when the key
	// has no expiry (never set by pollworker).
	Remaining time.Duration
	// Bad is the first key of the session that the acquire script cannot
	// use (fencing record, or counter of the layout before it; lease key),
	// nil if none: nobody acquires the session until it is repaired.
	Bad *BadKey
	// Token is the token of the session's fencing record: its last token
	// (of the lease held now, if any) where the session has a record, which
	// its first graceful release creates; 0 without one, or when the record
	// is bad.
	Token int64
	// HandoffDue is when the session's next poll is due by the handoff
	// mark of its last release, on the Redis server's clock (the next
	// holder keeps it, at most one interval ahead); zero when there is no
	// mark that still counts, or it does not say.
	HandoffDue time.Time
}

// Inspect reads who holds the leases of sessions, read-only
// (Reader.Inspect).
func (m *Manager) Inspect(ctx context.Context, sessions []string) ([]Holding, error) {
	return m.reader.Inspect(ctx, sessions)
}

// Unheld returns, read-only, those of sessions whose lease nobody holds
// (Reader.Unheld).
func (m *Manager) Unheld(ctx context.Context, sessions []string) ([]string, error) {
	return m.reader.Unheld(ctx, sessions)
}

type change struct {
	l        *Lease
	from, to State
}

func (m *Manager) notify(changes []change) {
	if m.cfg.OnChange == nil {
		return
	}
	for _, c := range changes {
		m.cfg.OnChange(c.l, c.from, c.to)
	}
}
