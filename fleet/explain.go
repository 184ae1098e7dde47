package fleet

import (
	"fmt"
	"time"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
)

// Reasons Explain gives, as codes (Explanation.Reason).
const (
	ReasonNotFound            = "not_found"
	ReasonMalformed           = "malformed"
	ReasonPaused              = "paused"
	ReasonNoWorker            = "unowned_no_live_worker"
	ReasonQuarantine          = "unowned_quarantine"
	ReasonLossDetected        = "unowned_loss_detected"
	ReasonUnowned             = "unowned"
	ReasonHolderNotLive       = "held_by_not_live"
	ReasonPreviousIncarnation = "held_by_previous_incarnation"
	ReasonCordoned            = "held_by_cordoned"
	ReasonPreferred           = "preferred_owner"
	ReasonOrphan              = "orphan_adopted_by_watcher"
	ReasonSettling            = "held_back_after_move"
	ReasonContended           = "contended"
	ReasonNoMatchingWorker    = "no_matching_worker"
	ReasonBadKey              = "bad_key"
	ReasonBadBucket           = "bad_bucket"
	ReasonNotIndexed          = "not_indexed"
)

// Explanation is why one session is where it is: the facts a Snapshot
// read about it, and from them a reason and one sentence (the JSON of
// `pollworker explain --json`).
type Explanation struct {
	Session string `json:"session"`
	// Bucket is the session's index bucket, the unit the plan places.
	Bucket int `json:"bucket"`
	// ServerTime is the Redis clock when the lease was read.
	ServerTime time.Time `json:"server_time"`
	// Definition is the stored session, nil when missing or malformed.
	Definition *Definition `json:"definition"`
	// Found is false when no definition is stored under the session key.
	Found bool `json:"found"`
	// Malformed says why a stored definition cannot be used, "" if it can.
	Malformed string `json:"malformed,omitempty"`
	// BadBucket is the key of the session's index bucket when that is not
	// a set: the workers read it as empty and take none of its sessions.
	BadBucket string `json:"bad_bucket,omitempty"`
	// NotIndexed is set when the definition is stored but its id is not
	// in its index bucket: the workers never find it.
	NotIndexed bool `json:"not_indexed,omitempty"`
	// Ranking are the live workers ranked for the bucket by rendezvous
	// hashing, best first (assign.Fleet.Rank); for a session with a
	// selector, the matching ones only.
	Ranking []RankedWorker `json:"ranking"`
	// Planned is the bucket's owner in the plan the workers compute, ""
	// with no live worker.
	Planned string `json:"planned_owner"`
	// PlanUnit is what the ranking's planned loads count: "polls/day", or
	// "sessions" for an index whose loads are incomplete.
	PlanUnit string `json:"plan_unit"`
	// NoMatchingWorker is set for a session whose selector no live
	// worker's labels match: it is polled by nobody.
	NoMatchingWorker bool `json:"no_matching_worker"`
	// MovedByBound is set when the balance bound moved the bucket off its
	// rendezvous owner (Ranking[0]).
	MovedByBound bool `json:"moved_by_balance_bound"`
	// Watcher is the worker that adopts the session if it stays without
	// a lease (assign.Plan.Watcher), "" with fewer than two workers.
	Watcher string `json:"watcher"`
	// Lease is the current lease, nil when nobody holds it.
	Lease *LeaseFacts `json:"lease"`
	// BadKey is a key of the session the workers cannot use, nil if none.
	BadKey *lease.BadKey `json:"bad_key,omitempty"`
	// Token is the session's fencing record's token, the last one minted
	// where the session has a record (its first graceful release creates
	// it); 0 if none.
	Token int64 `json:"token"`
	// Loss is the loss marker of the lease's slot.
	Loss LossFacts `json:"loss_marker"`
	// LeaseTTLMs is the workers' lease TTL.
	LeaseTTLMs int64 `json:"lease_ttl_ms"`
	// NextPoll is when the next poll is due and why, when Redis says
	// (a handoff mark, a backoff); nil otherwise.
	NextPoll *NextPoll `json:"next_poll,omitempty"`
	// Reason is a code for Why.
	Reason string `json:"reason"`
	// Why says in one sentence why the session is where it is.
	Why string `json:"why"`
}

// Definition is the part of a definition Explain shows (the URL is left
// out: it may carry a password).
type Definition struct {
	IntervalMs int64 `json:"interval_ms"`
	Paused     bool  `json:"paused"`
	// Selector is the session's selector (canonical), "" for none: only
	// workers whose labels match it are ranked, and may poll it.
	Selector string `json:"selector,omitempty"`
}

// RankedWorker is one live worker in a session's ranking.
type RankedWorker struct {
	ID string `json:"id"`
	// Incarnation is the live incarnation (from its heartbeat), "" if
	// unknown.
	Incarnation string `json:"incarnation,omitempty"`
	// Planned is the load the plan puts on it (in Explanation.PlanUnit),
	// Cap its bound (-1 when unbounded).
	Planned int `json:"planned"`
	Cap     int `json:"cap"`
	// Weight is the capacity it declared (--weight; 1 when unset).
	Weight float64 `json:"weight"`
}

// LeaseFacts is the lease of a session.
type LeaseFacts struct {
	Holder      string `json:"holder"`
	Incarnation string `json:"incarnation,omitempty"`
	// Live is set when Holder is a live worker; Current when the lease's
	// incarnation is that worker's live one (or either is unknown).
	Live    bool `json:"holder_live"`
	Current bool `json:"current_incarnation"`
	// Cordoned is set when Holder is a cordoned live worker (pollworker
	// drain): it hands its sessions off.
	Cordoned bool `json:"holder_cordoned"`
	// ExpiresInMs is the remaining TTL, -1 if the key has none.
	ExpiresInMs int64 `json:"expires_in_ms"`
	// AcquiredAgoMs is read from the token (minted from the server clock
	// in microseconds); -1 when the token does not tell.
	AcquiredAgoMs int64 `json:"acquired_ago_ms"`
}

// LossFacts is the loss marker of the slot of the session's lease,
// against the server's run id and clock.
type LossFacts struct {
	// Present is false when the marker is missing: the next acquisition
	// writes it and starts a quarantine.
	Present bool   `json:"present"`
	RunID   string `json:"run_id,omitempty"`
	// ServerRunID is the run id of the server now, "" when INFO is
	// refused. A marker of another run id means a restart or failover:
	// the next acquisition starts a quarantine.
	ServerRunID string `json:"server_run_id,omitempty"`
	// QuarantineLeftMs is how long the quarantine the marker records
	// lasts from now; 0 when over.
	QuarantineLeftMs int64 `json:"quarantine_left_ms"`
}

// NextPoll is when a session's next poll is due, as far as Redis tells,
// and why.
type NextPoll struct {
	// DueInMs is how long from the server's now the next poll is due (0:
	// due now or overdue).
	DueInMs int64 `json:"due_in_ms"`
	// Why says what sets that time.
	Why string `json:"why"`
}

// wrongTypeMarker is LossFacts.RunID for a loss marker of the wrong type.
const wrongTypeMarker = "(wrong type: the next acquisition overwrites it with a fresh quarantine)"

// Explain says why session id (read by Read) is where it is, or why nobody
// polls it: its planned owner and ranking, its lease and who holds it, its
// loss marker, its next due time, and a reason with one sentence. It
// follows the workers' rules: placement and selectors (Place), cordons,
// the settle rule (a worker keeps a session it took for one lease TTL),
// the orphan watcher, the loss quarantine (acquire.lua), bad keys, and
// leases held by a worker that is not live or by its previous
// incarnation.
func (s *Snapshot) Explain(id string) Explanation {
	e := Explanation{Session: id, Bucket: keyspace.BucketOf(id), Ranking: []RankedWorker{}, LeaseTTLMs: s.LeaseTTL.Milliseconds(), ServerTime: s.ServerTime}
	f, ok := s.Sessions[id]
	if !ok {
		f = &Facts{ID: id}
	}
	e.Found, e.Malformed, e.BadBucket, e.NotIndexed = f.Found, f.Malformed, f.BadBucket, f.NotIndexed
	if f.Session != nil {
		e.Definition = &Definition{IntervalMs: f.Session.Interval.D().Milliseconds(), Paused: f.Session.Paused, Selector: f.Session.SelectorKey()}
	}
	plan := s.PlanOf(id)
	if e.Definition != nil && e.Definition.Selector != "" {
		e.NoMatchingWorker = plan.Fleet().Len() == 0
	}
	for _, w := range plan.Fleet().Rank(id) {
		weight := 1.0
		if info, ok := s.Infos[w]; ok {
			weight = info.PlanWeight()
		}
		e.Ranking = append(e.Ranking, RankedWorker{ID: w, Incarnation: s.Infos[w].Incarnation, Planned: plan.Load(w), Cap: plan.Cap(w), Weight: weight})
	}
	e.PlanUnit = s.LoadUnit()
	if plan != s.Placement.Default {
		e.PlanUnit = "polls/day" // a selector's units are always weighed by load
	}
	e.Planned = plan.Owner(e.Bucket)
	e.MovedByBound = e.Planned != "" && !plan.Preferred(e.Bucket)
	e.Watcher = plan.Watcher(e.Bucket)
	if e.BadKey = f.Lease.Bad; e.BadKey == nil || e.BadKey.Role != lease.RoleFence {
		e.Token = f.Token
	}
	if h, ok := s.LeaseHolder(id); ok {
		e.Lease = &LeaseFacts{Holder: h.ID, Incarnation: h.Incarnation, Live: h.Live, Current: h.Current, Cordoned: h.Cordoned,
			ExpiresInMs: f.Lease.Remaining.Milliseconds(), AcquiredAgoMs: -1}
		if ago, ok := acquiredAt(e.Token, f.Lease.Owner, s.ServerTime); ok {
			e.Lease.AcquiredAgoMs = s.ServerTime.Sub(ago).Milliseconds()
		}
	}
	if l, ok := s.LossOf(id); ok {
		e.Loss = LossFacts{Present: l.Present, RunID: l.Marker.RunID, ServerRunID: l.ServerRunID,
			QuarantineLeftMs: l.Marker.QuarantineLeft(s.ServerTime).Milliseconds()}
		if l.WrongType {
			e.Loss.RunID = wrongTypeMarker
		}
	}
	e.NextPoll = s.nextPoll(f, e.Lease != nil)
	e.Reason, e.Why = why(e)
	return e
}

// nextPoll says when session f is polled next, when Redis tells: the
// handoff mark of a session nobody holds (the next holder keeps the
// previous holder's schedule, at most Options.FirstPollBound after it
// takes the lease), or the saved backoff of a held one.
func (s *Snapshot) nextPoll(f *Facts, held bool) *NextPoll {
	if f.Session == nil || f.Session.Paused {
		return nil
	}
	interval := f.Session.Interval.D()
	if !held {
		if f.Mark == nil || f.Mark.NextPoll.IsZero() {
			return nil
		}
		in := max(f.Mark.NextPoll.Sub(s.ServerTime), 0)
		if s.firstPollBound != nil {
			in = min(in, s.firstPollBound(interval))
		}
		return &NextPoll{DueInMs: in.Milliseconds(),
			Why: "the next holder keeps the previous holder's schedule (its handoff mark), at most one interval ahead"}
	}
	b := f.Backoff
	if b == nil || b.Failures == 0 || b.Wait <= 0 || b.Polled.IsZero() {
		return nil
	}
	due := b.Polled.Add(interval + b.Wait)
	return &NextPoll{DueInMs: max(due.Sub(s.ServerTime), 0).Milliseconds(),
		Why: fmt.Sprintf("backing off: %d polls failed in a row (last %s), so it waits %s more than its interval (--error-backoff); a new holder starts afresh",
			b.Failures, b.Last, ShortDuration(b.Wait))}
}

// why says, from the facts alone, why the session is where it is: a
// reason code and one sentence.
func why(e Explanation) (reason, sentence string) {
	if reason, sentence, ok := whyNobodyMay(e); ok {
		return reason, sentence
	}
	if e.Lease == nil {
		return whyUnowned(e)
	}
	return whyHeld(e)
}

// whyNobodyMay explains a session no worker may poll, ok false for one
// some worker may.
func whyNobodyMay(e Explanation) (reason, sentence string, ok bool) {
	held, nobody := "", "no worker polls it"
	switch l := e.Lease; {
	case l == nil:
	case l.Live && l.Current:
		held = fmt.Sprintf("; %s still holds its lease and releases it at its next round that reads the session: at once after a change made with pollworker, within 2m after a write around it (redis-cli); its lease runs %s more unless renewed", l.Holder, MsDuration(l.ExpiresInMs))
		// Written around pollworker, the change reaches the holder at
		// its audit: it polls the definition it read until then.
		nobody = "no other worker takes it, and " + l.Holder + " polls the definition it read before until it releases it"
	default:
		held = fmt.Sprintf("; its lease is still held by %s, which is not live, until it expires in %s", l.Holder, MsDuration(l.ExpiresInMs))
	}
	switch {
	case !e.Found:
		return ReasonNotFound, "session not found: no definition is stored under this id" + held, true
	case e.Malformed != "":
		return ReasonMalformed, nobody + ": its stored definition is malformed (" + e.Malformed + ")" + held, true
	case e.BadBucket != "":
		return ReasonBadBucket, nobody + ": its index bucket " + e.BadBucket + " is not a set (written around pollworker), so the workers read it as empty and take none of its sessions; " +
			"pollworker never deletes it: delete or rename the key, then apply the sessions again" + held, true
	case e.NotIndexed:
		return ReasonNotIndexed, nobody + ": its definition is stored but its id is not in its index bucket (written around pollworker), and the workers find sessions only there; " +
			"write it again (sessions add --replace, or apply)" + held, true
	case e.Definition.Paused:
		return ReasonPaused, "paused: no worker polls it" + held, true
	case e.BadKey != nil:
		return ReasonBadKey, fmt.Sprintf("nobody acquires it: its %s key %s cannot be used (%s); repair or delete it by hand (pollworker never does)",
			e.BadKey.Role, e.BadKey.Key, e.BadKey.Problem) + held, true
	case e.NoMatchingWorker:
		return ReasonNoMatchingWorker, fmt.Sprintf("no live worker matches its selector %s: nobody polls it until a worker whose --labels include it joins", e.Definition.Selector) + held, true
	}
	return "", "", false
}

// whyHeld explains an active session whose lease is held: by whom, and
// what the workers' rules do next (the hold rule, cordons, the orphan
// watcher, the settle rule).
func whyHeld(e Explanation) (reason, sentence string) {
	l := e.Lease
	switch {
	case !l.Live:
		return ReasonHolderNotLive, fmt.Sprintf("nobody polls it: its lease is held by %s, which is not live (crashed or cut off without releasing); "+
			"%s takes it when the lease expires in %s", l.Holder, OrNobody(e.Planned), MsDuration(l.ExpiresInMs))
	case !l.Current:
		return ReasonPreviousIncarnation, fmt.Sprintf("nobody polls it: its lease is held by a previous incarnation (%s) of %s, which crashed and restarted under the same id; "+
			"%s takes it when the lease expires in %s", l.Incarnation, l.Holder, OrNobody(e.Planned), MsDuration(l.ExpiresInMs))
	case l.Cordoned:
		return ReasonCordoned, fmt.Sprintf("draining: %s polls it but is cordoned, so it hands it to the planned owner %s at its next round",
			l.Holder, OrNobody(e.Planned))
	case l.Holder == e.Planned && e.MovedByBound:
		return ReasonPreferred, fmt.Sprintf("preferred owner: %s polls it, as planned; the balance bound moved its bucket off its rendezvous owner %s, which is full",
			l.Holder, e.Ranking[0].ID)
	case l.Holder == e.Planned:
		return ReasonPreferred, fmt.Sprintf("preferred owner: %s polls it, as planned (its rendezvous owner)", l.Holder)
	case l.Holder == e.Watcher:
		return ReasonOrphan, fmt.Sprintf("orphan adopted by the watcher: %s polls it (it took the session while nobody held it, or owned it before the membership changed) "+
			"and hands it back to the planned owner %s after the orphan grace", l.Holder, e.Planned)
	case l.AcquiredAgoMs >= 0 && l.AcquiredAgoMs < e.LeaseTTLMs:
		return ReasonSettling, fmt.Sprintf("held back after a move: %s took it %s ago and keeps it for one lease TTL unless the membership changes (settle rule); "+
			"then it hands it to the planned owner %s, in about %s", l.Holder, MsDuration(l.AcquiredAgoMs), e.Planned, MsDuration(e.LeaseTTLMs-l.AcquiredAgoMs))
	default:
		return ReasonContended, fmt.Sprintf("contended: %s polls it but has not handed it off yet; the planned owner %s takes it once %s releases it at its next round",
			l.Holder, e.Planned, l.Holder)
	}
}

// whyUnowned explains an active session nobody holds.
func whyUnowned(e Explanation) (reason, sentence string) {
	loss := e.Loss
	switch {
	case len(e.Ranking) == 0:
		return ReasonNoWorker, "unowned: there is no live worker"
	case loss.Present && loss.QuarantineLeftMs > 0 && (loss.ServerRunID == "" || loss.ServerRunID == loss.RunID):
		return ReasonQuarantine, fmt.Sprintf("unowned, waiting out the loss quarantine (a new keyspace, or Redis lost data): no free lease is taken until it ends in %s "+
			"(so that every lease granted before a loss has ended at its holder); then %s takes it. `pollworker init` spares a new keyspace this wait", MsDuration(loss.QuarantineLeftMs), e.Planned)
	case !loss.Present:
		return ReasonLossDetected, "unowned: the loss marker is missing (Redis lost its data, or the keyspace is new): the next acquisition starts the loss quarantine (--loss-quarantine), then " +
			e.Planned + " takes it"
	case loss.ServerRunID != "" && loss.ServerRunID != loss.RunID:
		return ReasonLossDetected, "unowned: Redis restarted or failed over since the loss marker was written (run id " + loss.RunID + ", now " + loss.ServerRunID +
			"): the next acquisition starts the loss quarantine (--loss-quarantine), then " + e.Planned + " takes it (under Cluster, unless the slot was migrated here: then it takes it at once)"
	case e.Watcher != "":
		return ReasonUnowned, fmt.Sprintf("unowned right now: the planned owner %s takes it at its next round; if it does not, the watcher %s adopts it after the orphan grace",
			e.Planned, e.Watcher)
	default:
		return ReasonUnowned, fmt.Sprintf("unowned right now: the planned owner %s takes it at its next round", e.Planned)
	}
}

// OrNobody is id, or says there is no live worker.
func OrNobody(id string) string {
	if id == "" {
		return "nobody (no live worker)"
	}
	return id
}

// MsDuration formats milliseconds for people; -1 (no TTL) is "never".
func MsDuration(ms int64) string {
	if ms < 0 {
		return "never"
	}
	return ShortDuration(time.Duration(ms) * time.Millisecond)
}

// ShortDuration formats d for people, to the millisecond.
func ShortDuration(d time.Duration) string { return d.Round(time.Millisecond).String() }
