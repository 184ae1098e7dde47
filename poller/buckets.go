package poller

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// The session index is split into keyspace.SessionBuckets buckets, and the
// planner (package fleet, with package assign's policy) places buckets, not sessions, on workers, with
// loads bounded in polls per day (each bucket weighs the poll rate of its
// sessions, as counted by the writers; or its number of sessions in an
// index written before loads were kept), so that a few sessions spread as
// evenly as many, and a session polled every second weighs what it costs.
// Each worker weighs its declared Config.Weight, read from the heartbeats. A worker
// therefore reads only the ids and definitions of the buckets assigned to
// it, plus the ids of the buckets it watches for orphans: 1/N of the index
// each, instead of all of it. A session's preferred worker is its bucket's.

// maxLoadPerRound bounds the session definitions read in one round, so that
// a large start makes progress round by round (each round acquires what
// was read) and notices membership changes in between.
const maxLoadPerRound = 20_000

// refresh reads membership and the session changes, and reads the buckets
// this worker needs (at most maxLoadPerRound definitions per round; a
// round that stops short asks for another). It reports false when Redis
// could not be read.
func (c *Coordinator) refresh(ctx context.Context, full bool) bool {
	rctx, cancel := c.requestCtx(ctx)
	defer cancel()
	c.news.peerNews.Store(false) // news from now on asks for another round
	membersChanged, ok := c.readMembers(rctx, full)
	if !ok {
		return false
	}
	if d, ok := c.view.members.NextExpiry(); ok {
		c.claims.scheduleExpiry(d + 2*retrySlack)
	}
	sizesChanged, ok := c.applyChanges(rctx)
	if !ok {
		return false
	}
	if membersChanged || sizesChanged {
		c.assignBuckets()
		c.view.sweepAll = true
	}
	return c.loadBuckets(ctx) && c.recheckHeld(ctx)
}

// readMembers reads the membership and, for a new one or in a full round,
// the members' weights and labels, and builds the fleet anew when they
// changed; changed asks for a new plan.
func (c *Coordinator) readMembers(ctx context.Context, full bool) (changed, ok bool) {
	m, err := c.registry.Members(ctx)
	if err != nil {
		c.health.redisFailed("members", "discovery", err)
		return false, false
	}
	c.bad.noteJunk(c.view.members.Junk, m.Junk)
	changed = m.Version != c.view.members.Version || c.view.fleet == nil
	c.view.membersChanged = c.view.membersChanged || changed
	c.view.members = m
	if changed {
		c.claims.watchOrphans()
		c.log.Info("membership changed", zap.Strings("nodes", m.Nodes), zap.Uint64("version", m.Version))
	}
	// The members' weights and labels, from their heartbeats: read for each
	// new membership (until a read succeeds), and in every full round (a
	// worker restarted at once under the same id, with other flags, or one
	// shedding load, changes no membership).
	if full || m.Version != c.view.weighing.readVersion {
		infos, err := c.registry.Get(ctx, m.Placeable()...)
		if err != nil {
			c.health.redisFailed("members", "discovery", err)
			return false, false
		}
		c.view.weighing.readVersion = m.Version
		c.view.weighing.members = fleet.WeighMembers(m.Placeable(), infos) // cordoned workers take nothing
	}
	ms, key := c.view.weighing.members, c.view.weighing.members.Key()
	if key != c.view.weighing.fleetKey || c.view.fleet == nil {
		f, err := c.view.weighing.planner.Fleet(ms, fleet.Selector{})
		if err != nil { // WeighMembers makes only valid weights
			c.log.Error("planner refused the fleet", zap.Error(err))
			return false, false
		}
		c.view.fleet, c.view.weighing.fleetKey = f, key
		changed = true // a new fleet: plan again
	}
	return changed, true
}

// applyChanges marks the buckets changed since the last round for reading
// and updates the bucket sizes and loads; sizesChanged asks for a new
// assignment (what the plan weighs changed).
func (c *Coordinator) applyChanges(ctx context.Context) (sizesChanged, ok bool) {
	if c.view.synced {
		changed, rev, reset, err := c.store.Changes(ctx, c.view.seenRev)
		if err != nil {
			c.health.redisFailed("sessions", "session read", err)
			return false, false
		}
		if len(changed) > 0 && changed[0].Complete != c.view.weighing.complete {
			reset = true // the loads were rebuilt: read them all
			c.log.Info("session loads complete: planning by poll load", zap.Bool("complete", changed[0].Complete))
		}
		if !reset {
			sizesChanged = c.view.applyChanged(changed, len(c.held) > 0)
			if len(changed) > 0 {
				c.claims.watchOrphans()
			}
			c.view.seenRev = rev
			return sizesChanged, true
		}
		if rev < c.view.seenRev {
			c.log.Warn("session change record lost; rereading every bucket", zap.Int64("seen", c.view.seenRev), zap.Int64("now", rev))
		}
	}
	w, err := c.store.Weights(ctx)
	if err != nil {
		c.health.redisFailed("sessions", "session read", err)
		return false, false
	}
	if !w.Complete && w.Rev > 0 { // an index never written has nothing to count
		c.log.Info("session loads incomplete (an index written before loads were kept): planning by session counts; `pollworker sessions reweigh` counts them")
	}
	c.view.resetWeights(w)
	c.unloadAll()
	return true, true
}

func (c *Coordinator) unloadAll() {
	for _, st := range c.view.buckets {
		st.loaded = false
	}
	c.claims.watchOrphans()
}

// plannable is the bucket weights the plan is computed from: the loads
// when the writers' loads are complete, else the sizes.
func (c *Coordinator) plannable() []int {
	if c.view.weighing.complete {
		return c.view.weighing.loads
	}
	return c.view.sizes
}

// planSpaces plans the units of every selector this worker matches (each
// among the matching members: a join or leave of a matching worker moves
// only what it must, one of another zone nothing) and the default space,
// and counts the active sessions of the selectors no placeable member
// matches (fleet.Planner.Place).
func (c *Coordinator) planSpaces() bool {
	w := &c.view.weighing
	mine := nodes.Labels(c.cfg.Labels)
	pl, err := w.planner.Place(w.members, c.plannable(), w.spaces, func(sel fleet.Selector) bool { return sel.Matches(mine) })
	if err != nil { // WeighMembers makes only valid weights
		c.log.Error("planner refused the fleet", zap.Error(err))
		return false
	}
	w.placement = pl
	c.view.plan = pl.Default
	unplaceable := pl.Unplaceable()
	if old := w.unplaceable.Swap(int64(unplaceable)); old != int64(unplaceable) && unplaceable > 0 {
		c.log.Warn("sessions with a selector that no live worker matches are polled by nobody", zap.Int("sessions", unplaceable))
	}
	return true
}

// assignBuckets asks the planner (package assign) where every bucket goes
// and decides which buckets this worker reads: those assigned to it, with
// definitions, and those it watches for orphans (it is the best ranked
// after their owner), ids only.
func (c *Coordinator) assignBuckets() {
	if !c.planSpaces() {
		return
	}
	me := c.cfg.ID
	want := make(map[int]bool) // bucket -> assigned
	if c.view.members.Contains(me) {
		want = c.view.weighing.placement.Buckets(me)
	}
	for b, st := range c.view.buckets {
		assigned, ok := want[b]
		if !ok {
			c.dropBucket(b, st)
			continue
		}
		if assigned && !st.assigned {
			st.loaded = false // definitions are needed now
		}
		st.assigned = assigned
	}
	var polled map[int][]string // bucket -> sessions polled here, for new records
	for b, assigned := range want {
		if _, ok := c.view.buckets[b]; !ok {
			if polled == nil {
				polled = c.polledByBucket()
			}
			// A new record starts from the sessions polled here, so that
			// the first read of the bucket stops those no longer in it
			// (the record of an earlier assignment may have been dropped,
			// say while this worker was briefly not a member).
			c.view.buckets[b] = &bucket{assigned: assigned, ids: polled[b]}
		}
	}
}

// polledByBucket returns the sessions polled here, by bucket.
func (c *Coordinator) polledByBucket() map[int][]string {
	out := make(map[int][]string)
	for id := range c.held {
		b := keyspace.BucketOf(id)
		out[b] = append(out[b], id)
	}
	return out
}

// dropBucket forgets a bucket that this worker no longer reads; the
// definitions of sessions it still polls are kept until they stop
// (reapLoops forgets them then).
func (c *Coordinator) dropBucket(b int, st *bucket) {
	for _, id := range st.ids {
		if _, running := c.held[id]; !running {
			delete(c.view.sessions, id)
		}
	}
	delete(c.view.buckets, b)
}

// loadBuckets reads the buckets marked for reading, assigned ones first
// (watched ones only once the orphan watch has begun), in chunks. It stops
// after maxLoadPerRound definitions, or when a peer joins or leaves, and
// asks for another round. Progress is kept chunk by chunk.
func (c *Coordinator) loadBuckets(ctx context.Context) bool {
	var todo []int
	watching := !c.cfg.Clock.Now().Before(c.claims.watchFrom)
	for b, st := range c.view.buckets {
		if !st.loaded && (st.assigned || watching) {
			todo = append(todo, b)
		}
	}
	if len(todo) == 0 {
		return true
	}
	sortBuckets(todo, c.view.buckets) // assigned first
	defs := 0
	for len(todo) > 0 {
		// Stop after maxLoadPerRound definitions, or when a peer joined or
		// left (the assignment this plan follows may be stale), or before
		// the buckets only watched once definitions were read (this round
		// acquires those sessions first: after a peer left, they are its
		// sessions, due now); the next round goes on from here.
		if defs >= maxLoadPerRound || (defs > 0 && (c.news.peerNews.Load() || !c.view.buckets[todo[0]].assigned)) {
			c.news.trigger()
			return true
		}
		n := c.loadChunkLen(todo)
		if err := c.loadChunk(ctx, todo[:n], &defs); err != nil {
			c.health.redisFailed("sessions", "session read", err)
			return false
		}
		todo = todo[n:]
	}
	return true
}

// loadChunkLen is how many of the buckets bs (in order) one read takes: up
// to session.PipelineLen buckets (one pipeline) and about loadChunkSessions sessions (by
// the writers' counts), all assigned or all watched, at least one bucket.
// Small reads let a join or leave interrupt a stale plan soon; a few
// thousand sessions spread over the 16,384 buckets leave most buckets
// with one session or none, so the bucket bound ends most reads.
func (c *Coordinator) loadChunkLen(bs []int) int {
	const maxBuckets = session.PipelineLen
	n, sessions := 0, 0
	for n < len(bs) && n < maxBuckets && (n == 0 || sessions < loadChunkSessions && c.view.buckets[bs[n]].assigned == c.view.buckets[bs[0]].assigned) {
		if c.view.sizes != nil {
			sessions += c.view.sizes[bs[n]]
		}
		n++
	}
	return n
}

// loadChunkSessions is the number of sessions one bucket read aims at.
const loadChunkSessions = 2000

// loadChunk reads the ids of some buckets, then the definitions of the
// sessions of the assigned ones and of those polled here.
func (c *Coordinator) loadChunk(ctx context.Context, bs []int, defs *int) error {
	rctx, cancel := context.WithTimeout(ctx, max(c.cfg.RequestTimeout, 2*time.Second))
	defer cancel()
	perBucket, err := c.store.BucketIDs(rctx, bs)
	if err != nil {
		return err
	}
	var fetch []string
	for i, b := range bs {
		for _, id := range perBucket[i] {
			if _, running := c.held[id]; running || c.view.buckets[b].assigned {
				fetch = append(fetch, id)
			}
		}
	}
	sessions, problems, err := c.loader.Fetch(rctx, fetch)
	if err != nil {
		return err
	}
	*defs += len(fetch)
	bad := make(map[int]int)
	for _, p := range problems {
		bad[keyspace.BucketOf(p.ID)]++
	}
	for i, b := range bs {
		st := c.view.buckets[b]
		for _, id := range st.ids {
			if _, known := c.view.sessions[id]; known {
				delete(c.view.sessions, id)
				c.touch(id)
			}
		}
		st.ids, st.loaded, st.malformed = perBucket[i], true, bad[b]
	}
	for _, s := range sessions {
		c.touch(s.ID)
		if !s.Paused {
			c.view.sessions[s.ID] = c.definition(s)
		}
	}
	return nil
}

// sortBuckets orders bucket numbers: assigned buckets first, then by number.
func sortBuckets(bs []int, st map[int]*bucket) {
	slices.SortFunc(bs, func(a, b int) int {
		if st[a].assigned != st[b].assigned {
			if st[a].assigned {
				return -1
			}
			return 1
		}
		return a - b
	})
}

// recheckHeld reads again the definitions of the sessions polled here
// whose bucket changed (staleHeld, recheckAll) and was not read again this
// round: those held outside this worker's loaded buckets (adopted as
// orphans, kept while a move settles, taken on a view that was stale by
// then). Every held session thus sees a pause, a removal or a new
// definition in the round that reads its change, wherever its bucket went.
// It reports false when Redis could not be read (the buckets stay stale).
func (c *Coordinator) recheckHeld(ctx context.Context) bool {
	if len(c.view.staleHeld) == 0 && !c.view.recheckAll {
		return true
	}
	ids := heldToRecheck(c.held, c.view.staleHeld, c.view.recheckAll, func(b int) bool {
		st, ok := c.view.buckets[b]
		return ok && st.loaded
	})
	if len(ids) > 0 {
		rctx, cancel := c.requestCtx(ctx)
		sessions, _, err := c.loader.Fetch(rctx, ids)
		cancel()
		if err != nil {
			c.health.redisFailed("sessions", "session read", err)
			return false
		}
		c.redefine(ids, sessions)
	}
	clear(c.view.staleHeld)
	c.view.recheckAll = false
	return true
}

// heldToRecheck returns, sorted, the held sessions whose definitions must
// be read again: their bucket is stale (or all are) and was not read
// again since (loaded).
func heldToRecheck[W any](held map[string]W, stale map[int]struct{}, all bool, loaded func(bucket int) bool) []string {
	var ids []string
	for id := range held {
		b := keyspace.BucketOf(id)
		if _, ok := stale[b]; (ok || all) && !loaded(b) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// redefine sets the definitions of ids as just read (sessions, the valid
// ones among them): an active one replaces the one kept, one paused,
// missing or malformed is dropped; each is looked at again this round
// (decide stops, restarts or keeps its loop).
func (c *Coordinator) redefine(ids []string, sessions []session.Session) {
	for _, id := range ids {
		delete(c.view.sessions, id)
		c.touch(id)
	}
	for _, s := range sessions {
		if !s.Paused {
			c.view.sessions[s.ID] = c.definition(s)
		}
	}
}
