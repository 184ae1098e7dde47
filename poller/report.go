package poller

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/nodes"
)

// reporter is what the worker tells about itself after each round: the
// Status it publishes (under its lock, read by Status from any
// goroutine), the Observer's Round, readiness once it took its share
// (checkShare), and being behind, logged once per change (checkBehind).
// Its fields but status are the main loop's; its collaborators are set by
// New.
type reporter struct {
	status published // the snapshot the main loop publishes at the end of a round

	health   *health
	sched    *scheduler      // the poll figures
	registry *nodes.Registry // the planned weight
	// readyBound is how long a worker may stay unready waiting for its
	// share: one lease TTL (a holder that does not hand off loses its
	// lease by then) plus two discovery intervals.
	readyBound time.Duration
	maxPolls   int // Config.MaxPolls, for the log of being behind
	obs        Observer
	log        *zap.Logger

	behind      PollStats // PollStats at the last change of Behind or its reason (logged)
	behindAt    time.Time // when behind was logged
	memberSince time.Time // first round as a member (readiness bound)
}

// published is the Status a round publishes, under its lock.
type published struct {
	mu   sync.Mutex
	last Status
}

// pollStats is PollStats; without countLoops, Backoff and LeasesHeld are
// left at 0 (the main loop's checkBehind needs neither).
func (r *reporter) pollStats(countLoops bool) PollStats {
	return pollStatsOf(r.sched.Stats(countLoops), r.registry.Info().PlanWeight(), countLoops)
}

// ready is Coordinator.Ready.
func (r *reporter) ready() bool { return r.notReady() == "" }

// notReady says why the worker is not ready, "" when it is.
func (r *reporter) notReady() string {
	if why := r.health.notLive(); why != "" {
		return why
	}
	if !r.health.shareTaken.Load() {
		return "it has not taken its share yet"
	}
	return ""
}

// snapshot is Coordinator.Status: the last round's figures, the leases
// held (of leases) and the counters now.
func (r *reporter) snapshot(leases *lease.Manager) Status {
	r.status.mu.Lock()
	s := r.status.last
	r.status.mu.Unlock()
	s.Ready = r.ready()
	s.Owned = nil
	for _, l := range leases.Held() {
		if l.State() == lease.Held {
			s.Owned = append(s.Owned, l.Session())
		}
	}
	s.Polls, s.PollErrors, s.PollPanics = r.health.polls.Load(), r.health.pollErrors.Load(), r.health.pollPanics.Load()
	s.ObserverPanics = r.health.observerPanics.Load()
	ps := r.pollStats(true)
	s.PollsRunning, s.PollsWaiting, s.PollsDeferred, s.PollsLate, s.Backoff = ps.Running, ps.Waiting, ps.Deferred, ps.Late, ps.Backoff
	s.Behind = ps.Behind
	s.EvictionRisk = r.health.evictionWarning.Load()
	return s
}

// checkBehind logs when the worker starts and stops being behind
// (PollStats.Behind), or its reason changes, once each time (the
// scheduler wakes the main loop on a change).
func (r *reporter) checkBehind(now time.Time) {
	ps := r.pollStats(false) // every round: without counting the loops
	if !behindNews(r.behind, ps, now.Sub(r.behindAt)) {
		return
	}
	r.behind, r.behindAt = ps, now
	logBehind(r.log, ps, r.maxPolls)
}

// relogBehind is how long after logging that it is behind a worker logs
// it again when its slowdown (due/achieved) has moved by more than a
// quarter: the first line, logged as the worker falls behind, gives the
// rates of a window that is partly before it.
const relogBehind = 30 * time.Second

// behindNews says whether cur, compared with was, logged since ago, is
// worth a log line: Behind or its reason changed, or, still behind for the
// same reason, its slowdown moved by more than a quarter and relogBehind
// has passed.
func behindNews(was, cur PollStats, ago time.Duration) bool {
	if cur.Behind != was.Behind || cur.BehindReason != was.BehindReason || cur.BehindHost != was.BehindHost {
		return true
	}
	if !cur.Behind || ago < relogBehind {
		return false
	}
	a, b := was.Slowdown(), cur.Slowdown()
	return b > a*1.25 || a > b*1.25
}

// checkShare makes the worker ready (Ready) once it holds every session
// the plan gives it (missing is none), those other workers still hand over
// included, or once readyBound has passed since its first round as a
// member, so that a rolling update that waits for readiness replaces the
// next worker only after this one took its share. Readiness stays once
// reached.
func (r *reporter) checkShare(missing int, now time.Time) {
	if r.memberSince.IsZero() {
		r.memberSince = now
	}
	if missing == 0 {
		r.health.shareTaken.Store(true)
		return
	}
	if bound := r.readyBound; now.Sub(r.memberSince) >= bound {
		r.log.Warn("ready without its whole share", zap.Int("missing", missing), zap.Duration("after", bound))
		r.health.shareTaken.Store(true)
	}
}

// publish publishes the round's view (v) and the number of sessions held:
// the Status's figures and the Observer's Round.
func (r *reporter) publish(v *view, held int) {
	malformed := v.malformedCount()
	r.status.mu.Lock()
	r.status.last.Members = v.members.Nodes
	r.status.last.Sessions = len(v.sessions)
	r.status.last.Malformed = malformed
	r.status.mu.Unlock()
	r.obs.Round(RoundReport{Members: len(v.members.Nodes), Sessions: len(v.sessions), Owned: held, Malformed: malformed,
		MembershipChanged: v.membersChanged})
	v.membersChanged = false
}

// Status is a snapshot of what the worker sees and holds.
type Status struct {
	// ID is the worker id.
	ID string
	// Ready is Ready() at the time of the snapshot.
	Ready bool
	// Members are the live workers seen in the last round.
	Members []string
	// Sessions is the number of active (not paused) sessions assigned to
	// this worker, or polled by it as orphans.
	Sessions int
	// Owned are the sessions whose lease this worker holds, sorted.
	Owned []string
	// Polls, PollErrors and PollPanics count polls since start.
	Polls, PollErrors, PollPanics int64
	// ObserverPanics counts the panics of Config.Observer's methods,
	// recovered (the first of each method logged with its stack).
	ObserverPanics int64
	// PollsRunning and PollsWaiting are the polls running now and those
	// due but waiting for a slot (Config.MaxPolls).
	PollsRunning, PollsWaiting int
	// PollsDeferred counts the polls that waited for a slot since start,
	// PollsLate those that started later than a tenth of their interval
	// after they were due: a worker that cannot keep up with its share.
	PollsDeferred, PollsLate int64
	// Backoff is the number of sessions whose last poll failed and that
	// are polled less often for it (Config.MaxErrorBackoff).
	Backoff int
	// Behind is PollStats.Behind: the worker cannot keep up with its share.
	Behind bool
	// Malformed is the number of malformed session entries in the buckets
	// assigned to this worker.
	Malformed int
	// EvictionRisk is set when Redis runs a maxmemory-policy other than
	// noeviction (leases and counters may be evicted).
	EvictionRisk bool
}
