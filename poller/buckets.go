package poller

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
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
func (v *view) refresh(ctx context.Context, full bool) bool {
	rctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	v.news.peerNews.Store(false) // news from now on asks for another round
	// A change read (membership, weights, sizes) asks for a new plan until
	// one is made: a read that fails later in the round must not lose it,
	// or the worker would keep the old plan until the next change (seen: a
	// joiner never handed its share, the session changes read timing out
	// on a loaded machine right after the join was read).
	membersChanged, ok := v.readMembers(rctx, full)
	v.replan = v.replan || membersChanged
	if !ok {
		return false
	}
	v.health.worksAgain("discovery")
	if d, ok := v.members.NextExpiry(); ok {
		v.claims.scheduleExpiry(d + 2*retrySlack)
	}
	sizesChanged, ok := v.applyChanges(rctx)
	v.replan = v.replan || sizesChanged
	if !ok {
		return false
	}
	if sizesChanged || v.indexSeen == indexUnseen {
		v.noteEmpty()
	}
	if v.replan {
		v.replan = !v.assignBuckets()
		v.sweepAll = true
	}
	if full && v.synced {
		v.auditShare()
	}
	if !v.loadBuckets(ctx) || !v.recheckHeld(ctx) {
		return false
	}
	v.health.worksAgain("session read")
	return true
}

// readMembers reads the membership and, for a new one or in a full round,
// the members' weights and labels, and builds the fleet anew when they
// changed; changed asks for a new plan.
func (v *view) readMembers(ctx context.Context, full bool) (changed, ok bool) {
	before := v.clock.Now()
	m, err := v.registry.Members(ctx)
	if err != nil {
		v.health.redisFailed("members", "discovery", err)
		return false, false
	}
	v.noteClock(before, v.clock.Now(), m.ServerTimeMs)
	v.bad.noteJunk(v.members.Junk, m.Junk)
	changed = m.Version != v.members.Version || v.fleet == nil
	v.membersChanged = v.membersChanged || changed
	v.members = m
	if changed {
		v.claims.watchOrphans()
		v.log.Info("membership changed", zap.Strings("nodes", m.Nodes), zap.Uint64("version", m.Version))
	}
	// The members' weights and labels, from their heartbeats: read for each
	// new membership (until a read succeeds), and in every full round (a
	// worker restarted at once under the same id, with other flags, or one
	// shedding load, changes no membership).
	if full || m.Version != v.weighing.readVersion {
		infos, err := v.registry.Get(ctx, m.Placeable()...)
		if err != nil {
			v.health.redisFailed("members", "discovery", err)
			return changed, false
		}
		v.weighing.readVersion = m.Version
		placeable, other := fleet.ReadingSessions(m.Placeable(), infos, v.sessNS)
		v.noteOtherSessions(other, infos)
		v.weighing.members = fleet.WeighMembers(placeable, infos) // cordoned workers take nothing, nor those reading other sessions
		v.noteMixedSlack(infos)
		v.health.peerRoom.Store(peersWithRoom(v.me, placeable, infos))
	}
	ms, key := v.weighing.members, v.weighing.members.Key()
	if key != v.weighing.fleetKey || v.fleet == nil {
		f, err := v.weighing.planner.Fleet(ms, fleet.Selector{})
		if err != nil { // WeighMembers makes only valid weights
			v.log.Error("planner refused the fleet", zap.Error(err))
			return changed, false
		}
		v.fleet, v.weighing.fleetKey = f, key
		changed = true // a new fleet: plan again
	}
	return changed, true
}

// indexSeen is what a worker last saw of the session index's size.
type indexSeen int8

const (
	indexUnseen indexSeen = iota
	indexEmpty
	indexFilled
)

// noteEmpty logs when the session index is seen empty (at the first read,
// or after it held sessions) and when sessions appear in it again: a
// worker pointed at another database or session prefix than the one the
// sessions were written to would otherwise idle, ready, in silence.
func (v *view) noteEmpty() {
	total := 0
	for _, n := range v.sizes {
		total += n
	}
	seen := indexFilled
	if total == 0 {
		seen = indexEmpty
	}
	if seen == v.indexSeen {
		return
	}
	was := v.indexSeen
	v.indexSeen = seen
	switch {
	case seen == indexEmpty:
		v.log.Warn("no sessions to poll: the session index is empty; add sessions (pollworker sessions add or apply), or check that --redis-url (its database number too) and --session-prefix are the ones they were written with",
			zap.String("session_namespace", v.sessNS))
	case was == indexEmpty:
		v.log.Info("sessions to poll: the session index holds sessions again", zap.Int("sessions", total))
	}
}

// noteMixedSlack logs, when it changes, whether the members publish
// different balance slacks: the fleet plans with the tightest
// (fleet.AgreedSlack), which may not be the one this worker was given.
func (v *view) noteMixedSlack(infos []nodes.Info) {
	slack, mixed := v.weighing.members.Slack(v.weighing.ownSlack)
	if mixed == v.weighing.slackMixed {
		return
	}
	v.weighing.slackMixed = mixed
	if !mixed {
		v.log.Info("the members publish one balance slack again", zap.Float64("balance_slack", slack))
		return
	}
	theirs := make(map[string]float64, len(infos))
	for _, info := range infos {
		theirs[info.ID] = info.BalanceSlack
	}
	v.log.Warn("workers are configured with different balance slacks: the fleet plans with the tightest; give them all the same BalanceSlack",
		zap.Float64("balance_slack", slack), zap.Float64("configured", v.weighing.ownSlack), zap.Any("members", theirs))
}

// noteOtherSessions logs, when they change, the members left out of
// placement because their heartbeat says they read another session
// namespace (fleet.ReadingSessions): a worker started with another
// --session-prefix under the same key prefix, which would otherwise be
// planned sessions it cannot see.
func (v *view) noteOtherSessions(other []string, infos []nodes.Info) {
	if slices.Equal(other, v.otherSessions) {
		return
	}
	v.otherSessions = other
	if len(other) == 0 {
		v.log.Info("no member reads another session namespace any more")
		return
	}
	ns := make(map[string]string, len(other))
	for _, info := range infos {
		if slices.Contains(other, info.ID) {
			ns[info.ID] = info.Sessions
		}
	}
	v.log.Error("workers that read another session namespace are left out of placement: every worker under one key prefix must use the same session prefix",
		zap.String("session_namespace", v.sessNS), zap.Any("others", ns))
}

// applyChanges marks the buckets changed since the last round for reading
// and updates the bucket sizes and loads; sizesChanged asks for a new
// assignment (what the plan weighs changed).
func (v *view) applyChanges(ctx context.Context) (sizesChanged, ok bool) {
	if v.synced {
		changed, rev, reset, err := v.store.Changes(ctx, v.seenRev)
		if err != nil {
			v.health.redisFailed("sessions", "session read", err)
			return false, false
		}
		if len(changed) > 0 && changed[0].Complete != v.weighing.complete {
			reset = true // the loads were rebuilt: read them all
			v.log.Info("session loads complete: planning by poll load", zap.Bool("complete", changed[0].Complete))
		}
		if !reset {
			sizesChanged = v.applyChanged(changed, len(v.held) > 0)
			if len(changed) > 0 {
				v.claims.watchOrphans()
			}
			v.seenRev = rev
			return sizesChanged, true
		}
		switch {
		case rev < v.seenRev:
			v.log.Warn("session change record lost; rereading every bucket", zap.Int64("seen", v.seenRev), zap.Int64("now", rev))
		case len(changed) == 0 && rev > v.seenRev:
			v.log.Info("session change record started afresh (a new index, or Redis lost data); rereading every bucket", zap.Int64("seen", v.seenRev), zap.Int64("now", rev))
		}
	}
	w, err := v.store.Weights(ctx)
	if err != nil {
		v.health.redisFailed("sessions", "session read", err)
		return false, false
	}
	if !w.Complete && w.Rev > 0 { // an index never written has nothing to count
		v.log.Info("session loads incomplete (an index written before loads were kept): planning by session counts; `pollworker sessions reweigh` counts them")
	}
	v.resetWeights(w)
	v.unloadAll()
	return true, true
}

func (v *view) unloadAll() {
	for _, st := range v.buckets {
		st.loaded = false
	}
	v.claims.watchOrphans()
}

// plannable is the bucket weights the plan is computed from: the loads
// when the writers' loads are complete, else the sizes.
func (v *view) plannable() []int {
	if v.weighing.complete {
		return v.weighing.loads
	}
	return v.sizes
}

// planSpaces plans the units of every selector this worker matches (each
// among the matching members: a join or leave of a matching worker moves
// only what it must, one of another zone nothing) and the default space,
// and counts the active sessions of the selectors no placeable member
// matches (fleet.Planner.Place).
func (v *view) planSpaces() bool {
	w := &v.weighing
	mine := nodes.Labels(v.labels)
	pl, err := w.planner.Place(w.members, v.plannable(), w.spaces, func(sel fleet.Selector) bool { return sel.Matches(mine) })
	if err != nil { // WeighMembers makes only valid weights
		v.log.Error("planner refused the fleet", zap.Error(err))
		return false
	}
	w.placement = pl
	v.plan = pl.Default
	unplaceable := pl.Unplaceable()
	if old := w.unplaceable.Swap(int64(unplaceable)); old != int64(unplaceable) && unplaceable > 0 {
		v.log.Warn("sessions with a selector that no live worker matches are polled by nobody", zap.Int("sessions", unplaceable))
	}
	return true
}

// assignBuckets asks the planner (package assign) where every bucket goes
// and decides which buckets this worker reads: those assigned to it, with
// definitions, and those it watches for orphans (it is the best ranked
// after their owner), ids only. It reports false when no plan was made.
func (v *view) assignBuckets() bool {
	if !v.planSpaces() {
		return false
	}
	want := make(map[int]bool) // bucket -> assigned
	if v.members.Contains(v.me) {
		want = v.weighing.placement.Buckets(v.me)
	}
	v.applyAssignment(want)
	return true
}

// applyAssignment makes the buckets read here those of want (bucket ->
// assigned: definitions read; watched: ids only): a bucket newly assigned
// is read again; one no longer assigned keeps only the definitions of the
// sessions polled here, as its read would (forgetDefinitions); one no
// longer wanted is dropped; a new one starts from the sessions polled
// here.
func (v *view) applyAssignment(want map[int]bool) {
	for b, st := range v.buckets {
		assigned, ok := want[b]
		if !ok {
			v.dropBucket(b, st)
			continue
		}
		if assigned && !st.assigned {
			st.loaded = false // definitions are needed now
		}
		if !assigned && st.assigned {
			v.forgetDefinitions(st) // watched now: kept as its read keeps them
		}
		st.assigned = assigned
	}
	var polled map[int][]string // bucket -> sessions polled here, for new records
	for b, assigned := range want {
		if _, ok := v.buckets[b]; !ok {
			if polled == nil {
				polled = v.polledByBucket()
			}
			// A new record starts from the sessions polled here, so that
			// the first read of the bucket stops those no longer in it
			// (the record of an earlier assignment may have been dropped,
			// say while this worker was briefly not a member).
			v.buckets[b] = &bucket{assigned: assigned, ids: polled[b]}
		}
	}
}

// polledByBucket returns the sessions polled here, by bucket.
func (v *view) polledByBucket() map[int][]string {
	out := make(map[int][]string)
	for id := range v.held {
		b := keyspace.BucketOf(id)
		out[b] = append(out[b], id)
	}
	return out
}

// dropBucket forgets a bucket that this worker no longer reads; the
// definitions of sessions it still polls are kept until they stop
// (holdings.reap forgets them then).
func (v *view) dropBucket(b int, st *bucket) {
	v.forgetDefinitions(st)
	delete(v.buckets, b)
}

// forgetDefinitions drops the definitions of st's sessions that are not
// polled here: a bucket that is not assigned keeps no others (loadChunk),
// and a definition kept would count as pending here (Status) although
// another worker polls it.
func (v *view) forgetDefinitions(st *bucket) {
	for _, id := range st.ids {
		if _, running := v.held[id]; !running {
			delete(v.sessions, id)
		}
	}
}

// loadBuckets reads the buckets marked for reading, assigned ones first
// (watched ones only once the orphan watch has begun), in chunks. It stops
// after maxLoadPerRound definitions, or when a peer joins or leaves, and
// asks for another round. Progress is kept chunk by chunk.
func (v *view) loadBuckets(ctx context.Context) bool {
	var todo []int
	watching := !v.clock.Now().Before(v.claims.watchFrom)
	for b, st := range v.buckets {
		if !st.loaded && (st.assigned || watching) {
			todo = append(todo, b)
		}
	}
	if len(todo) == 0 {
		return true
	}
	sortBuckets(todo, v.buckets) // assigned first
	defs := 0
	for len(todo) > 0 {
		// Stop after maxLoadPerRound definitions, or when a peer joined or
		// left (the assignment this plan follows may be stale), or before
		// the buckets only watched once definitions were read (this round
		// acquires those sessions first: after a peer left, they are its
		// sessions, due now); the next round goes on from here.
		if defs >= maxLoadPerRound || (defs > 0 && (v.news.peerNews.Load() || !v.buckets[todo[0]].assigned)) {
			v.news.trigger()
			return true
		}
		n := v.loadChunkLen(todo)
		if err := v.loadChunk(ctx, todo[:n], &defs); err != nil {
			v.health.redisFailed("sessions", "session read", err)
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
func (v *view) loadChunkLen(bs []int) int {
	const maxBuckets = session.PipelineLen
	n, sessions := 0, 0
	for n < len(bs) && n < maxBuckets && (n == 0 || sessions < loadChunkSessions && v.buckets[bs[n]].assigned == v.buckets[bs[0]].assigned) {
		if v.sizes != nil {
			sessions += v.sizes[bs[n]]
		}
		n++
	}
	return n
}

// loadChunkSessions is the number of sessions one bucket read aims at.
const loadChunkSessions = 2000

// loadChunk reads the ids of some buckets, then the definitions of the
// sessions of the assigned ones and of those polled here.
func (v *view) loadChunk(ctx context.Context, bs []int, defs *int) error {
	rctx, cancel := context.WithTimeout(ctx, max(v.timeout, 2*time.Second))
	defer cancel()
	perBucket, badBuckets, err := v.store.BucketIDs(rctx, bs)
	if err != nil {
		return err
	}
	v.bad.noteBuckets(bs, badBuckets)
	var fetch []string
	for i, b := range bs {
		for _, id := range perBucket[i] {
			if _, running := v.held[id]; running || v.buckets[b].assigned {
				fetch = append(fetch, id)
			}
		}
	}
	sessions, problems, err := v.loader.Fetch(rctx, fetch)
	if err != nil {
		return err
	}
	*defs += len(fetch)
	bad := make(map[int]int)
	for _, p := range problems {
		bad[keyspace.BucketOf(p.ID)]++
	}
	for i, b := range bs {
		st := v.buckets[b]
		for _, id := range st.ids {
			if _, known := v.sessions[id]; known {
				delete(v.sessions, id)
				v.touch(id)
			}
		}
		st.ids, st.loaded, st.malformed = perBucket[i], true, bad[b]
	}
	for _, s := range sessions {
		v.touch(s.ID)
		if !s.Paused {
			v.sessions[s.ID] = v.definition(s)
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
func (v *view) recheckHeld(ctx context.Context) bool {
	if len(v.staleHeld) == 0 && !v.recheckAll {
		return true
	}
	ids := heldToRecheck(v.held, v.staleHeld, v.recheckAll, func(b int) bool {
		st, ok := v.buckets[b]
		return ok && st.loaded
	})
	if len(ids) > 0 {
		rctx, cancel := context.WithTimeout(ctx, v.timeout)
		sessions, _, err := v.loader.Fetch(rctx, ids)
		cancel()
		if err != nil {
			v.health.redisFailed("sessions", "session read", err)
			return false
		}
		v.redefine(ids, sessions)
	}
	clear(v.staleHeld)
	v.recheckAll = false
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
func (v *view) redefine(ids []string, sessions []session.Session) {
	for _, id := range ids {
		delete(v.sessions, id)
		v.touch(id)
	}
	for _, s := range sessions {
		if !s.Paused {
			v.sessions[s.ID] = v.definition(s)
		}
	}
}

// touch marks a session for the next round to look at.
func (v *view) touch(id string) { v.touched[id] = struct{}{} }

// matches reports whether this worker may poll s: its labels match the
// session's selector.
func (v *view) matches(s session.Session) bool {
	return fleet.SelectorOf(s).Matches(v.labels)
}

// onlyMatching returns the ids whose known definition this worker
// matches (defence in depth: the plan never gives a worker a session it
// does not match).
func (v *view) onlyMatching(ids []string) []string {
	out := ids[:0:0]
	for _, id := range ids {
		if s, ok := v.sessions[id]; ok && !v.matches(*s) {
			v.log.Warn("not acquiring a session whose selector this worker does not match", zap.String("session", id), zap.String("selector", s.Selector))
			continue
		}
		out = append(out, id)
	}
	return out
}

// isUnmatched reports whether id was found, in a watched bucket, to have
// a selector this worker does not match.
func (v *view) isUnmatched(id string) bool {
	_, ok := v.weighing.unmatched[id]
	return ok
}

// ownerOf returns the preferred live worker of a session, "" with no live
// worker (or, for a session with a selector, none that matches it or when
// this worker does not match it: it plans only the selectors it matches).
func (v *view) ownerOf(id string) string {
	sel := fleet.Selector{}
	if s, ok := v.sessions[id]; ok && s.Selector != "" {
		sel = fleet.SelectorOf(*s)
	}
	p, ok := v.weighing.placement.Planned(sel)
	if !ok || p == nil {
		return ""
	}
	return p.OwnerOf(id)
}

// definition returns s to keep in view.sessions: the definition its
// worker polls with when that is the same, so that the two share one copy,
// else a new one.
func (v *view) definition(s session.Session) *session.Session {
	if h := v.held[s.ID]; h != nil && sameSession(s, *h.sess) {
		return h.sess
	}
	return &s
}

// malformedCount counts the malformed entries of the assigned buckets.
func (v *view) malformedCount() int {
	n := 0
	for _, st := range v.buckets {
		if st.assigned {
			n += st.malformed
		}
	}
	return n
}

// confirmDefinitions makes the sessions just acquired (results) start
// from definitions at least as new as the change that let them go: a
// holder releases a session as soon as it learns of its pause or removal,
// and the lease can reach this worker before its view, read earlier in the
// round, has that change. It reads the changes since the view's revision
// (one round trip, a short reply when nothing changed) and, for the
// acquired sessions whose bucket changed, their definitions (redefine);
// of every acquired session with all (view.confirmAll: a lease lost, an
// acquisition's outcome unknown: a loss may have gone unseen, with its
// changes). When that cannot be read, their definitions are dropped, so
// that acquired releases their leases, and their buckets read again.
func (v *view) confirmDefinitions(ctx context.Context, results []lease.Result, all bool) {
	var got []string
	for _, r := range results {
		if _, running := v.held[r.Session]; r.Lease != nil && !running && r.Lease.State() == lease.Held {
			got = append(got, r.Session)
		}
	}
	if len(got) == 0 || !v.synced {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	recheck, err := got, error(nil)
	if !all {
		recheck, err = v.inChangedSince(rctx, got)
	}
	if len(recheck) == 0 {
		return
	}
	var sessions []session.Session
	if err == nil {
		sessions, _, err = v.loader.Fetch(rctx, recheck)
	}
	if err != nil {
		v.health.redisFailed("sessions", "session read", err)
		v.dropDefinitions(recheck) // dropped: acquired gives them back, and their buckets are read again
		return
	}
	v.redefine(recheck, sessions)
}

// inChangedSince returns those of ids whose bucket changed since the
// view's revision (all of them when the change record was reset, or with
// the error when it could not be read).
func (v *view) inChangedSince(ctx context.Context, ids []string) ([]string, error) {
	changed, _, reset, err := v.store.Changes(ctx, v.seenRev)
	if err != nil || reset {
		return ids, err
	}
	return inChangedBuckets(ids, changed), nil
}

// dropDefinitions forgets the definitions of ids (each looked at again this
// round) and marks their buckets to be read again.
func (v *view) dropDefinitions(ids []string) {
	for _, id := range ids {
		delete(v.sessions, id)
		v.touch(id)
		if st, ok := v.buckets[keyspace.BucketOf(id)]; ok {
			st.loaded = false
		}
	}
}

// inChangedBuckets returns the ids (in order) whose bucket is among the
// changed ones.
func inChangedBuckets(ids []string, changed []session.BucketSize) []string {
	buckets := make(map[int]struct{}, len(changed))
	for _, ch := range changed {
		buckets[ch.Bucket] = struct{}{}
	}
	var out []string
	for _, id := range ids {
		if _, ok := buckets[keyspace.BucketOf(id)]; ok {
			out = append(out, id)
		}
	}
	return out
}

// watchList returns the sessions of the loaded watched buckets that this
// worker does not poll.
func (v *view) watchList() []string {
	var watch []string
	for _, st := range v.buckets {
		if st.assigned || !st.loaded {
			continue
		}
		for _, id := range st.ids {
			if _, ok := v.held[id]; !ok && keyspace.ValidateID(id) == nil && !v.isUnmatched(id) {
				watch = append(watch, id)
			}
		}
	}
	return watch
}
