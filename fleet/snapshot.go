package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
)

// MaxLossSlots bounds the loss markers one read looks at under Redis
// Cluster (one per hash slot of the unowned sessions asked about):
// sessions of the slots beyond it are not classified.
const MaxLossSlots = 64

// Options are what a Reader needs to know of how the workers run.
type Options struct {
	// BalanceSlack is the workers' poller.Config.BalanceSlack.
	BalanceSlack float64
	// LeaseTTL is the workers' lease TTL: a worker keeps a session it
	// took for one lease TTL before handing it on (the settle rule).
	LeaseTTL time.Duration
	// FirstPollBound is how long a new holder keeps its predecessor's
	// schedule at most (poller.FirstPollBound); nil: unbounded.
	FirstPollBound func(interval time.Duration) time.Duration
	// Sessions is the session namespace read (keyspace.Space.SessionNamespace):
	// members that read another take nothing (ReadingSessions), as in the
	// workers' plans. NewReader sets it from its keys; empty in Build: every
	// member takes part.
	Sessions string
	// Backoff decodes the saved state of a held session (state.Record's
	// Data) into its error backoff, ok false when it has none (the HTTP
	// poller's: httppoll.DecodeState); nil: backoffs are not read.
	Backoff func(data []byte) (b Backoff, ok bool)
}

// Backoff is what a session's saved state says of its failing polls.
type Backoff struct {
	// Failures counts the polls that failed in a row.
	Failures int
	// Last is the last outcome: an HTTP status or an error.
	Last string
	// Polled is when the last saved poll started.
	Polled time.Time
	// Wait is how much longer than its interval the session waits.
	Wait time.Duration
}

// Reader reads Snapshots of one keyspace. It writes nothing, but prunes
// expired members from the node index, as every worker does.
type Reader struct {
	client  redis.UniversalClient
	keys    keyspace.Space
	opts    Options
	members *nodes.Reader
	store   *session.Store
	leases  *lease.Reader
	states  *state.Store
}

// NewReader returns a Reader of the fleet in keys.
func NewReader(client redis.UniversalClient, keys keyspace.Space, opts Options) (*Reader, error) {
	members, err := nodes.NewReader(client, keys, nil)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	store, err := session.NewStore(client, keys)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if opts.Sessions == "" {
		opts.Sessions = keys.SessionNamespace()
	}
	return &Reader{client: client, keys: keys, opts: opts, members: members, store: store,
		leases: lease.NewReader(client, keys, 0), states: state.NewStore(client, keys)}, nil
}

// Snapshot is one read of the fleet: the live members, their heartbeat
// infos, the index's bucket weights and the plans the workers compute
// from them, and the facts about the sessions read (their definitions,
// leases and the loss markers of their slots; with Read, also their
// fencing counters, handoff marks and saved backoffs). It is read in a
// bounded number of round trips, not atomically. Its methods are pure.
type Snapshot struct {
	// ServerTime is the Redis clock right after the leases were read.
	ServerTime time.Time
	// Members are the live workers, as the workers read them.
	Members nodes.Membership
	// Infos are the live members' heartbeat infos by id (missing when
	// expired or malformed).
	Infos map[string]nodes.Info
	// Weights are the index's bucket sizes and loads.
	Weights session.Weights
	// Placement is the plans the workers compute from the above.
	Placement Placement
	// OtherSessions are the live placeable members whose heartbeat says
	// they read another session namespace than Options.Sessions: left out
	// of Placement (ReadingSessions).
	OtherSessions []string
	// LeaseTTL is Options.LeaseTTL.
	LeaseTTL time.Duration
	// Sessions are the sessions read, by id; Order lists them as read
	// (sorted by id for ReadAll).
	Sessions map[string]*Facts
	Order    []string
	// Malformed are the malformed entries of the index (ReadAll).
	Malformed []session.Problem

	firstPollBound func(time.Duration) time.Duration
	loss           map[uint16]*Loss // slot -> its loss marker
	slotOf         func(id string) uint16
}

// Facts are what a Snapshot read about one session.
type Facts struct {
	ID string
	// Found is false when nothing is stored under the id.
	Found bool
	// Session is the definition, nil when missing or malformed.
	Session *session.Session
	// Malformed says why a stored definition cannot be used.
	Malformed string
	// BadBucket is the key of its index bucket when that is not a set
	// (written around pollworker): the workers read the bucket as empty,
	// so none takes the session. Read only by Read.
	BadBucket string
	// NotIndexed is set for a stored session whose id is not in its
	// index bucket: the workers, which find sessions through the index,
	// never take it. Read only by Read.
	NotIndexed bool
	// Lease is its lease (Owner "" when nobody holds it).
	Lease lease.Holding
	// Token is the session's fencing record's token, the last one minted
	// where the session has a record (its first graceful release creates
	// it); 0 if none or not read.
	Token int64
	// Mark is its handoff mark, nil if none or not read.
	Mark *lease.HandoffMark
	// Backoff is its saved error backoff, nil if none or not read.
	Backoff *Backoff
}

// Loss is the loss marker of one hash slot, against the server's run id.
type Loss struct {
	// Present is false when the marker is missing: the next acquisition
	// writes it and starts a quarantine.
	Present bool
	// WrongType is set for a marker of the wrong type: the next
	// acquisition overwrites it with a fresh quarantine.
	WrongType bool
	Marker    lease.LossMarker
	// ServerRunID is the run id of the server now, "" when INFO is
	// refused (a restricted ACL: a restart then goes unseen, as it does
	// in acquire.lua).
	ServerRunID string
}

// Restarted reports whether the server restarted or failed over since the
// marker was written: the next acquisition starts a quarantine.
func (l Loss) Restarted() bool {
	return l.Present && !l.WrongType && l.ServerRunID != "" && l.ServerRunID != l.Marker.RunID
}

// read reads the membership, the infos and the weights, and plans.
func (r *Reader) read(ctx context.Context) (*Snapshot, error) {
	m, err := r.members.Members(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	infos, err := r.members.Get(ctx, m.Nodes...)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	w, err := r.store.Weights(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	s, err := newSnapshot(m, infos, w, r.opts)
	if err != nil {
		return nil, err
	}
	s.slotOf = r.slotOf
	return s, nil
}

// newSnapshot plans for membership m, the members' infos and the bucket
// weights w.
func newSnapshot(m nodes.Membership, infos []nodes.Info, w session.Weights, opts Options) (*Snapshot, error) {
	s := &Snapshot{Members: m, Infos: make(map[string]nodes.Info, len(infos)), Weights: w, LeaseTTL: opts.LeaseTTL,
		Sessions: map[string]*Facts{}, firstPollBound: opts.FirstPollBound, loss: map[uint16]*Loss{}}
	for _, info := range infos {
		s.Infos[info.ID] = info
	}
	var err error
	placeable := m.Placeable()
	if opts.Sessions != "" {
		placeable, s.OtherSessions = ReadingSessions(placeable, infos, opts.Sessions)
	}
	s.Placement, err = NewPlanner(opts.BalanceSlack).Place(WeighMembers(placeable, infos), w.Plannable(), w.Spaces, nil)
	if err != nil {
		return nil, err
	}
	s.ServerTime = time.UnixMilli(m.ServerTimeMs).UTC()
	return s, nil
}

// Observed is what a Reader reads, given directly, for building a
// Snapshot without Redis (Build): tests, and tools that read otherwise.
type Observed struct {
	// ServerTime is the Redis clock after the leases were read; zero:
	// the membership's.
	ServerTime time.Time
	Members    nodes.Membership
	Infos      []nodes.Info
	Weights    session.Weights
	// Sessions and Malformed are the entries read (Order follows them:
	// sessions, then malformed ones).
	Sessions  []session.Session
	Malformed []session.Problem
	// Leases, Tokens, Marks and Backoffs are by session (missing: none).
	Leases   map[string]lease.Holding
	Tokens   map[string]int64
	Marks    map[string]lease.HandoffMark
	Backoffs map[string]Backoff
	// Loss is the loss marker of the keyspace (one, outside Cluster); nil:
	// not read.
	Loss *Loss
}

// Build makes the Snapshot a Reader would have read o.
func Build(o Observed, opts Options) (*Snapshot, error) {
	s, err := newSnapshot(o.Members, o.Infos, o.Weights, opts)
	if err != nil {
		return nil, err
	}
	if !o.ServerTime.IsZero() {
		s.ServerTime = o.ServerTime
	}
	var ids []string
	for _, sess := range o.Sessions {
		ids = append(ids, sess.ID)
	}
	for _, p := range o.Malformed {
		ids = append(ids, p.ID)
	}
	s.addSessions(ids, o.Sessions, o.Malformed)
	s.Malformed = o.Malformed
	for id, f := range s.Sessions {
		f.Lease = o.Leases[id]
		f.Lease.Session = id
		f.Token = o.Tokens[id]
		if m, ok := o.Marks[id]; ok {
			f.Mark = &m
		}
		if b, ok := o.Backoffs[id]; ok {
			f.Backoff = &b
		}
	}
	if o.Loss != nil {
		l := *o.Loss
		s.loss[0] = &l
		s.slotOf = func(string) uint16 { return 0 }
	}
	return s, nil
}

// ReadFleet reads the members, their infos and the bucket weights, and
// plans: no session (three round trips, whatever the number of sessions).
func (r *Reader) ReadFleet(ctx context.Context) (*Snapshot, error) { return r.read(ctx) }

// Read reads the fleet and everything about the sessions ids: their
// definitions, leases, fencing counters and handoff marks (one pipeline
// each), the loss markers of their slots (one round trip per slot, at most
// MaxLossSlots slots), and the saved backoffs of the held ones
// (Options.Backoff; one pipeline).
func (r *Reader) Read(ctx context.Context, ids ...string) (*Snapshot, error) {
	s, err := r.read(ctx)
	if err != nil {
		return nil, err
	}
	sessions, problems, err := r.store.Fetch(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("fleet: read sessions: %w", err)
	}
	s.addSessions(ids, sessions, problems)
	if err := r.readIndexed(ctx, s, ids); err != nil {
		return nil, err
	}
	if err := r.readLeases(ctx, s, ids); err != nil {
		return nil, err
	}
	if err := r.readBackoffs(ctx, s, ids); err != nil {
		return nil, err
	}
	return s, r.readLoss(ctx, s, ids)
}

// readIndexed records, for each stored session of ids, whether its index
// bucket is of the wrong type (Facts.BadBucket) or, if not, whether its id
// is missing from it (Facts.NotIndexed): the workers find sessions only
// through the index.
func (r *Reader) readIndexed(ctx context.Context, s *Snapshot, ids []string) error {
	buckets := make([]int, len(ids))
	for i, id := range ids {
		buckets[i] = keyspace.BucketOf(id)
	}
	members, bad, err := r.store.BucketIDs(ctx, buckets)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	for i, id := range ids {
		f := s.Sessions[id]
		switch {
		case f == nil || !f.Found:
		case slices.Contains(bad, buckets[i]):
			f.BadBucket = r.keys.SessionBucket(buckets[i])
		default:
			_, indexed := slices.BinarySearch(members[i], id)
			f.NotIndexed = !indexed
		}
	}
	return nil
}

// ReadAll reads the fleet, every session of the index and the leases of
// the active ones, and the loss markers of the slots of those nobody
// holds: what status and check report.
func (r *Reader) ReadAll(ctx context.Context) (*Snapshot, error) {
	s, err := r.read(ctx)
	if err != nil {
		return nil, err
	}
	sessions, problems, err := r.store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	ids := make([]string, 0, len(sessions)+len(problems))
	for _, sess := range sessions {
		ids = append(ids, sess.ID)
	}
	for _, p := range problems {
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	s.addSessions(ids, sessions, problems)
	s.Malformed = problems
	active := s.Active()
	if err := r.readLeases(ctx, s, active); err != nil {
		return nil, err
	}
	return s, r.readLoss(ctx, s, s.unowned(active))
}

// addSessions records the definitions read for ids.
func (s *Snapshot) addSessions(ids []string, sessions []session.Session, problems []session.Problem) {
	for _, id := range ids {
		if _, ok := s.Sessions[id]; !ok {
			s.Sessions[id] = &Facts{ID: id}
			s.Order = append(s.Order, id)
		}
	}
	for i := range sessions {
		f := s.Sessions[sessions[i].ID]
		f.Found, f.Session = true, &sessions[i]
	}
	for _, p := range problems {
		if f, ok := s.Sessions[p.ID]; ok {
			f.Found, f.Malformed = true, problemText(p)
		}
	}
}

// problemText says what is wrong with a malformed entry.
func problemText(p session.Problem) string {
	return strings.TrimPrefix(p.Err.Error(), "get "+p.ID+": ")
}

// readLeases reads the leases of ids, with their tokens and handoff marks
// (lease.Holding: the fencing record, or the keys of the layout before it),
// and then the server's clock.
func (r *Reader) readLeases(ctx context.Context, s *Snapshot, ids []string) error {
	if len(ids) > 0 {
		hs, err := r.leases.Inspect(ctx, ids)
		if err != nil {
			return fmt.Errorf("fleet: %w", err)
		}
		for _, h := range hs {
			f := s.Sessions[h.Session]
			f.Lease, f.Token = h, h.Token
			if !h.HandoffDue.IsZero() {
				f.Mark = &lease.HandoffMark{NextPoll: h.HandoffDue}
			}
		}
	}
	now, err := r.client.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("fleet: read the server clock: %w", err)
	}
	s.ServerTime = now.UTC()
	return nil
}

// readBackoffs reads the saved state of the held active sessions of ids
// and decodes their backoffs. A state that cannot be read or decoded says
// nothing (sessions get and check report it).
func (r *Reader) readBackoffs(ctx context.Context, s *Snapshot, ids []string) error {
	if r.opts.Backoff == nil {
		return nil
	}
	var held []string
	for _, id := range ids {
		if f := s.Sessions[id]; f.Lease.Owner != "" && f.Session != nil && !f.Session.Paused {
			held = append(held, id)
		}
	}
	if len(held) == 0 {
		return nil
	}
	recs, err := r.states.LoadMany(ctx, held)
	if err != nil {
		return nil //nolint:nilerr // a state that cannot be read says nothing of the schedule
	}
	for _, id := range held {
		if rec, ok := recs[id]; ok && rec.Data != nil {
			if b, ok := r.opts.Backoff(rec.Data); ok {
				s.Sessions[id].Backoff = &b
			}
		}
	}
	return nil
}

// slotOf is the hash slot of session id's loss marker: its lease's under
// Cluster, 0 elsewhere (one marker covers the keyspace), as
// lease.Manager reads it.
func (r *Reader) slotOf(id string) uint16 {
	if _, ok := r.client.(*redis.ClusterClient); ok {
		return keyspace.Slot(r.keys.Lease(id))
	}
	return 0
}

// readLoss reads the loss markers of the slots of ids (at most
// MaxLossSlots) and the run id of the server that holds each.
func (r *Reader) readLoss(ctx context.Context, s *Snapshot, ids []string) error {
	for _, id := range ids {
		slot := r.slotOf(id)
		if _, ok := s.loss[slot]; ok || len(s.loss) >= MaxLossSlots {
			continue
		}
		l, err := r.readMarker(ctx, slot)
		if err != nil {
			return err
		}
		s.loss[slot] = l
	}
	return nil
}

// readMarker reads one slot's loss marker and its server's run id in one
// round trip.
func (r *Reader) readMarker(ctx context.Context, slot uint16) (*Loss, error) {
	key := r.keys.Epoch(slot)
	var server redis.Cmdable = r.client
	if cc, ok := r.client.(*redis.ClusterClient); ok {
		c, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("fleet: find the master of the loss marker: %w", err)
		}
		server = c
	}
	var get *redis.StringCmd
	var info *redis.StringCmd
	_, _ = server.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		info = p.Info(ctx, "server")
		return nil
	})
	l := &Loss{}
	marker, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		l.Present, l.WrongType = true, true
	case err != nil:
		return nil, fmt.Errorf("fleet: read the loss marker: %w", err)
	default:
		l.Present, l.Marker = true, lease.ParseLossMarker(marker)
	}
	if text, err := info.Result(); err == nil {
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
				l.ServerRunID = v
			}
		}
	}
	return l, nil
}

// unowned returns the active sessions of ids nobody holds.
func (s *Snapshot) unowned(ids []string) []string {
	var out []string
	for _, id := range ids {
		if f := s.Sessions[id]; f.Session != nil && !f.Session.Paused && f.Lease.Owner == "" {
			out = append(out, id)
		}
	}
	return out
}
