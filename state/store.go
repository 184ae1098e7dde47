package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/scripts/lua"
)

// DefaultMaxSize is the default limit on the data of one session's state.
const DefaultMaxSize = 64 << 10

// ErrTooLarge is returned (wrapped) by Save for data over the Store's size
// limit: nothing was written, the stored state is unchanged.
var ErrTooLarge = errors.New("state: data too large")

// ErrStale is returned (wrapped) by Save when the writer's lease is not the
// session's current one (it expired, was released or another holder took
// it), or a newer token wrote the stored state: nothing was written.
var ErrStale = errors.New("state: stale lease")

// ErrNotHeld is returned (wrapped, with ErrStale) by Save, SlotStarted and
// SlotFinished when the session's lease key, read in the same script as
// the write, holds another owner value than the writer's, or none: proof
// that the writer's lease is lost (lease.Manager.NotHeld), where any other
// error proves nothing.
var ErrNotHeld = errors.New("its lease is no longer held")

// ErrNotAHash is returned (wrapped) by SlotStarted and SlotFinished when
// the session's state key is of another Redis type: nothing was written,
// and nothing will be until an operator removes the key (the poller's
// next Save replaces it).
var ErrNotAHash = errors.New("state: the state key is not a hash")

// Record is a session's saved state.
type Record struct {
	// Data is the poller's bytes; nil when nothing was saved.
	Data []byte
	// Token is the fencing token of the lease that wrote it (0: never),
	// as lease.Lease.Token gives it.
	Token int64
	// Saved is when it was written (Redis TIME, ms); zero when never.
	Saved time.Time
	// PolledAt is the start of the poll that saved it, on the Redis
	// server's clock (ms), for schedule continuity; zero when never saved
	// or not given.
	PolledAt time.Time
	// Read is the Redis server's time (ms) when the record was read (by
	// Load or LoadMany), or written (by Save): Read − PolledAt is how long
	// before that read the poll started, whatever the writer's clock said.
	Read time.Time
	// Corrupt says why the stored state is unreadable ("" when it is
	// readable or absent): its key is not a hash, or a field is missing or
	// not a decimal, or its token is above every fencing token. A corrupt
	// state reads as never saved (Token 0, nil Data) and is left in Redis
	// for an operator to see; the next fenced Save overwrites it.
	Corrupt string
}

// SincePolled returns how long before it was read the poll that saved r
// started; ok is false when r does not say (never saved, or saved without
// a poll start).
func (r Record) SincePolled() (d time.Duration, ok bool) {
	if r.PolledAt.IsZero() || r.Read.IsZero() {
		return 0, false
	}
	return r.Read.Sub(r.PolledAt), true
}

// Store reads and writes the fenced state of sessions. It is safe for
// concurrent use; it starts no goroutine but LoadBatched's, which ends
// once no call waits.
type Store struct {
	client      redis.UniversalClient
	keys        keyspace.Space
	cluster     bool
	maxSize     int
	batchSize   int
	loadTimeout time.Duration
	clock       clock.PassiveClock
	save, load  *redis.Script
	batch       batcher // LoadBatched's calls
}

// DefaultLoadTimeout is the default bound on one batch of LoadBatched.
const DefaultLoadTimeout = 5 * time.Second

// Option configures a Store.
type Option func(*Store)

// WithMaxSize sets the largest data Save accepts, in bytes (default
// DefaultMaxSize); n <= 0 keeps the default.
func WithMaxSize(n int) Option {
	return func(s *Store) {
		if n > 0 {
			s.maxSize = n
		}
	}
}

// WithLoadTimeout bounds each batch of LoadBatched (default
// DefaultLoadTimeout); d <= 0 keeps the default.
func WithLoadTimeout(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.loadTimeout = d
		}
	}
}

// WithClock sets the clock on which Save measures how long ago a poll
// started (the polledAt it is given must be on the same clock); default the
// real clock.
func WithClock(c clock.PassiveClock) Option {
	return func(s *Store) {
		if c != nil {
			s.clock = c
		}
	}
}

// The scripts, hashed once (a redis.Script is immutable).
var (
	saveScript = redis.NewScript(lua.StateSave)
	loadScript = redis.NewScript(lua.StateLoad)
)

// NewStore returns a Store of the states in keys (whose prefixes must be
// valid: keyspace.Space.Validate).
func NewStore(client redis.UniversalClient, keys keyspace.Space, opts ...Option) *Store {
	_, cluster := client.(*redis.ClusterClient)
	s := &Store{client: client, keys: keys, cluster: cluster, maxSize: DefaultMaxSize, batchSize: lease.DefaultBatchSize,
		loadTimeout: DefaultLoadTimeout, clock: clock.RealClock{}, save: saveScript, load: loadScript}
	for _, o := range opts {
		o(s)
	}
	return s
}

// MaxSize is the largest data Save accepts, in bytes.
func (s *Store) MaxSize() int { return s.maxSize }

// Save writes data as the state of l's session, fenced by l: only if l's
// owner value is still in the session's lease key and no greater token
// wrote the stored state (else ErrStale, nothing written). polledAt is when
// the poll that saves started, on the Store's clock (zero: unknown); it is
// stored on the Redis server's clock. Data over MaxSize is refused with
// ErrTooLarge before anything is sent. Any other error (Redis unreachable,
// a lost reply) leaves the outcome unknown: it is returned, never read as
// success. The Record returned is what was written.
func (s *Store) Save(ctx context.Context, l *lease.Lease, polledAt time.Time, data []byte) (Record, error) {
	id := l.Session()
	if len(data) > s.maxSize {
		return Record{}, fmt.Errorf("%w: session %s: %d bytes, at most %d", ErrTooLarge, id, len(data), s.maxSize)
	}
	ago := int64(-1)
	if !polledAt.IsZero() {
		ago = max(s.clock.Since(polledAt).Milliseconds(), 0)
	}
	token := strconv.FormatInt(l.Token(), 10)
	reply, err := s.save.Run(ctx, s.client, []string{s.keys.Lease(id), s.keys.State(id)},
		l.Owner(), token, data, ago).Slice()
	if err != nil {
		return Record{}, fmt.Errorf("save state of %s: %w", id, err)
	}
	if len(reply) != 3 {
		return Record{}, fmt.Errorf("save state of %s: script reply has %d values, want 3", id, len(reply))
	}
	if ok, _ := reply[0].(int64); ok != 1 {
		switch reason, _ := reply[1].(string); reason {
		case "lease":
			return Record{}, fmt.Errorf("%w: session %s: %w by %s (token %d)", ErrStale, id, ErrNotHeld, l.Owner(), l.Token())
		case "token":
			return Record{}, fmt.Errorf("%w: session %s: the state was written under token %v, above %d", ErrStale, id, reply[2], l.Token())
		default:
			return Record{}, fmt.Errorf("save state of %s: unexpected script reply %v", id, reply)
		}
	}
	saved, ok1 := reply[1].(int64)
	polled, ok2 := reply[2].(int64)
	if !ok1 || !ok2 {
		return Record{}, fmt.Errorf("save state of %s: unexpected script reply %v", id, reply)
	}
	if data == nil {
		data = []byte{}
	}
	return Record{Data: data, Token: l.Token(), Saved: msTime(saved), PolledAt: msTime(polled), Read: msTime(saved)}, nil
}

// Delete removes the state of session, whoever wrote it: for a session
// removed for good. A later Load reads it as never saved. It is not
// fenced: a holder still polling the session may save again after it.
func (s *Store) Delete(ctx context.Context, session string) error {
	if err := keyspace.ValidateID(session); err != nil {
		return err
	}
	if err := s.client.Del(ctx, s.keys.State(session)).Err(); err != nil {
		return fmt.Errorf("delete state of %s: %w", session, err)
	}
	return nil
}

// Compact is a Record in 56 bytes instead of 104, for a holder that keeps
// one per session (poller.SessionState): the Store makes every Record's times
// whole milliseconds, so they are kept as Unix milliseconds, 0 for the
// zero time. Record gives back the very Record it was made from, but for
// Corrupt (a corrupt Record has no data to keep: its holder reports it
// when it loads it).
type Compact struct {
	data                         []byte
	token, saved, polledAt, read int64
}

// Compact returns r in its compact form; r's times must be whole
// milliseconds, as the Store makes them.
func (r Record) Compact() Compact {
	return Compact{data: r.Data, token: r.Token, saved: unixMs(r.Saved), polledAt: unixMs(r.PolledAt), read: unixMs(r.Read)}
}

// Record returns the Record c was made from.
func (c Compact) Record() Record {
	return Record{Data: c.data, Token: c.token, Saved: msTime(c.saved), PolledAt: msTime(c.polledAt), Read: msTime(c.read)}
}

// Token is the Token of the Record c was made from.
func (c Compact) Token() int64 { return c.token }

// unixMs is t in milliseconds since the epoch; 0 for the zero time.
func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// msTime is the time of ms milliseconds since the epoch; zero for 0.
func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
