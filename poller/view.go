package poller

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
	"github.com/pollworker/pollworker/session"
)

// view is the worker's read model: its picture of the fleet and the
// sessions, and the reading that refreshes it from Redis each round
// (refresh, buckets.go: membership, the change record, the buckets this
// worker reads, the held sessions to recheck), read by the rest of the
// round (ownerOf, the sessions). Owned by the main loop.
type view struct {
	// What it reads with: set by New, never changed.
	me       string
	labels   nodes.Labels // this worker's labels (selectors)
	sessNS   string       // the session namespace read (keyspace.Space.SessionNamespace)
	clock    clock.WithTickerAndDelayedExecution
	timeout  time.Duration // Config.RequestTimeout
	log      *zap.Logger
	registry *nodes.Registry  // the membership and the members' infos
	store    *session.Store   // the change record, sizes and loads, the buckets' ids
	loader   *session.Loader  // the definitions
	news     *news            // peer news stops a long read; a read that stops short asks for a round
	health   *health          // a failed read is Redis unreachable
	claims   *claims          // the orphan watch (its start, its rate) and the members' expiry timer
	bad      *badData         // junk members, reported once
	held     map[string]*hold // the sessions held (their loops'; the view only reads it)

	// The picture.
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
	replan         bool                        // what the plan weighs changed since it was last made (kept across a round that failed)
	wasMember      bool                        // member at the last round
	otherSessions  []string                    // members left out of placement: they read another session namespace (reported when it changes)
	indexSeen      indexSeen                   // whether the session index was last seen empty (reported when it changes)
	clockSkew      clockSkew                   // this worker's wall clock against Redis's (noteClock)
	// staleHeld are the buckets changed since the sessions polled here
	// in them were last read, and recheckAll says every bucket may have
	// (the change record was lost): recheckHeld reads those sessions
	// again when no bucket read of the round covered them.
	staleHeld  map[int]struct{}
	recheckAll bool
	// lossReread: the view was set to be read afresh for the loss
	// quarantine under way (dataLost), until a lease is taken again.
	lossReread bool
	audit      audit // the buckets read again though unchanged (auditShare)
	// confirmAll: the next acquisitions read again the definition of every
	// session they take, not only of those in changed buckets
	// (confirmDefinitions): a lease was lost, or an acquisition's outcome
	// was unknown, so the notice of a loss quarantine (dataLost) may have
	// been missed, and the change record may not show what changed during
	// the loss. Set by the renewal goroutine too.
	confirmAll atomic.Bool
}

// dataLost makes the next round read every bucket afresh, once per loss
// quarantine (an acquisition found Redis had lost data: restarted empty,
// flushed, failed over). The session revision counter starts afresh there
// at Redis' clock and records its start, which Changes reports as a reset;
// this is the defence for a clock that went back across the loss, where
// the counter could reach the seen revision again with other changes (the
// operator applies the sessions again, then pauses one) and read as
// "nothing new": a paused session would read as active.
func (v *view) dataLost() {
	if v.lossReread || !v.synced {
		return
	}
	v.lossReread, v.synced = true, false
	v.log.Warn("Redis lost data: the sessions are read afresh", zap.Int64("seen revision", v.seenRev))
}

// bucket is what the worker knows of one index bucket.
type bucket struct {
	assigned  bool     // this worker is preferred: definitions are read
	loaded    bool     // ids (and, if assigned, definitions) are current
	ids       []string // sorted, as in the index
	malformed int      // malformed entries among them (assigned buckets)
}

// weighing is what the plan weighs besides the membership: the bucket
// loads and the members' weights.
type weighing struct {
	loads    []int  // bucket -> polls per day (session.PollsPerDay)
	complete bool   // loads count every session: plan by loads, else by sizes
	fleetKey string // the members, weights and labels the fleet was built for (fleet.Members.Key)
	// readVersion is the membership version whose weights and labels were
	// read last (a cordon or uncordon bumps the version too); a read that
	// failed leaves it, so the next round reads again.
	readVersion uint64

	// Placement rules (package fleet): the sessions with a selector are
	// placed by unit (selector, bucket), each selector's units among the
	// placeable members whose labels match it.
	members     fleet.Members             // the placeable members, with weights and labels
	planner     *fleet.Planner            // keeps each space's fleet while the members stay
	spaces      map[string]*session.Space // selector -> its units' sizes and loads
	placement   fleet.Placement           // the last plans, of the selectors this worker matches
	unplaceable atomic.Int64              // active sessions whose selector no placeable member matches
	unmatched   map[string]struct{}       // watched sessions whose selector this worker does not match
	ownSlack    float64                   // Config.BalanceSlack: the planner's when no member publishes one
	slackMixed  bool                      // the members publish different slacks (logged by noteMixedSlack)
}

// applyChanged applies the bucket changes read from the change record:
// the buckets changed are read again (and, when sessions are held, their
// held sessions rechecked: staleHeld), their sizes and loads updated; it
// reports whether what the plan weighs changed.
func (v *view) applyChanged(changed []session.BucketSize, holding bool) (sizesChanged bool) {
	w := &v.weighing
	for _, ch := range changed {
		if st, ok := v.buckets[ch.Bucket]; ok {
			st.loaded = false
		}
		if holding {
			v.staleHeld[ch.Bucket] = struct{}{}
		}
		if ch.Selector != "" {
			sp := w.space(ch.Selector)
			if sp.Sizes[ch.Bucket] != ch.Size || sp.Loads[ch.Bucket] != ch.Load {
				sp.Sizes[ch.Bucket], sp.Loads[ch.Bucket], sizesChanged = ch.Size, ch.Load, true
			}
			continue
		}
		if v.sizes[ch.Bucket] != ch.Size {
			v.sizes[ch.Bucket] = ch.Size
			sizesChanged = sizesChanged || !w.complete
		}
		if w.loads[ch.Bucket] != ch.Load {
			w.loads[ch.Bucket] = ch.Load
			sizesChanged = sizesChanged || w.complete
		}
	}
	if len(changed) > 0 {
		clear(w.unmatched) // a selector may have changed
	}
	return sizesChanged
}

// resetWeights starts the view afresh from the sizes and loads read
// whole (session.Store.Weights): every held session is rechecked.
func (v *view) resetWeights(w session.Weights) {
	v.seenRev, v.sizes, v.synced = w.Rev, w.Sizes, true
	v.weighing.loads, v.weighing.complete = w.Loads, w.Complete
	v.weighing.spaces = w.Spaces
	v.recheckAll = true
	clear(v.weighing.unmatched)
}

// space returns the sizes and loads of selector sel's units, made on first
// use.
func (w *weighing) space(sel string) *session.Space {
	if w.spaces == nil {
		w.spaces = make(map[string]*session.Space)
	}
	sp, ok := w.spaces[sel]
	if !ok {
		sp = &session.Space{Sizes: make([]int, keyspace.SessionBuckets), Loads: make([]int, keyspace.SessionBuckets)}
		w.spaces[sel] = sp
	}
	return sp
}

// noteUnmatched records a watched session whose selector this worker does
// not match, so that the orphan watch stops reading it.
func (w *weighing) noteUnmatched(id string) {
	if w.unmatched == nil {
		w.unmatched = make(map[string]struct{})
	}
	w.unmatched[id] = struct{}{}
}
