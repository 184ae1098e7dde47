// Package metrics exports a worker's measurements as Prometheus metrics.
//
// Prometheus implements poller.Observer. Every name has the pollworker_
// prefix; label values are drawn from small fixed sets (no session ids), so
// the number of series does not grow with the number of sessions. Counters
// whose label values are known in advance (lease events, Redis errors by
// operation, polls by outcome) are exported at 0 from the start, so that
// rate() and alerts see a series before the first event.
//
// Gauges of what the worker holds now (pollworker_leases_held) are counted
// at each scrape from a Source given to Watch, not kept from events.
//
// Every metric is this worker's view: summing pollworker_sessions or
// pollworker_leases_held over the workers counts each session once only
// when the fleet is settled; `pollworker status` reads the fleet's view
// from Redis.
package metrics

import (
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pollworker/pollworker/poller"
)

// Label values exported at 0 from the start.
var (
	// RedisOps are the operations poller.Observer.RedisError names.
	RedisOps = []string{"acquire", "heartbeat", "members", "publish", "release", "renew", "sessions", "state"}
	// PollOutcomes are the outcomes poller.Observer.PollDone reports.
	PollOutcomes = []string{"ok", "error", "cancelled", "panic", "no_capacity"}
	// SessionStates are the values of pollworker_sessions' state label.
	SessionStates = []string{"owned", "pending", "malformed"}
)

// leaseEventLabels are the event and reason pairs a worker reports (see
// ReasonCategory): a lease is acquired, recovered and released for one
// reason each, made uncertain by a failed renewal, and lost at its
// deadline, to another owner, or by a reply that came too late.
var leaseEventLabels = [][2]string{
	{string(poller.EventAcquired), "none"},
	{string(poller.EventRecovered), "none"},
	{string(poller.EventReleased), "released"},
	{string(poller.EventUncertain), "renew_error"},
	{string(poller.EventLost), "deadline"},
	{string(poller.EventLost), "not_owner"},
	{string(poller.EventLost), "late_reply"},
}

// Option configures New.
type Option func(*options)

type options struct {
	version, commit string
}

// WithBuildInfo sets the labels of pollworker_build_info; without it both
// are "unknown".
func WithBuildInfo(version, commit string) Option {
	return func(o *options) { o.version, o.commit = version, commit }
}

// Source is what the gauges computed at scrape time read: the worker's
// figures now (a *poller.Coordinator).
type Source interface {
	PollStats() poller.PollStats
}

// Prometheus holds the collectors of one worker.
type Prometheus struct {
	source         atomic.Pointer[Source] // set by Watch; nil until then
	buildInfo      *prometheus.GaugeVec
	leasesHeld     prometheus.GaugeFunc
	leaseEvents    *prometheus.CounterVec
	renewed        prometheus.Counter
	renewRoundTrip prometheus.Histogram
	sessions       *prometheus.GaugeVec
	liveNodes      prometheus.Gauge
	memberChanges  prometheus.Counter
	polls          *prometheus.CounterVec
	pollsBy        map[string]prometheus.Counter // polls' counter of each of PollOutcomes, looked up once (PollDone runs at every poll)
	pollDuration   prometheus.Histogram
	redisErrors    *prometheus.CounterVec
	handoffGap     prometheus.Histogram
	badData        *prometheus.CounterVec
	slots          slotMetrics
}

var _ poller.Observer = (*Prometheus)(nil)

// New creates the collectors and registers them with reg (required). Two
// Coordinators in one process share a registry through a label each:
// New(prometheus.WrapRegistererWith(prometheus.Labels{"worker": id}, reg)),
// since the collectors' names are the same.
func New(reg prometheus.Registerer, opts ...Option) (*Prometheus, error) {
	if reg == nil {
		return nil, errors.New("metrics: New needs a prometheus.Registerer (prometheus.DefaultRegisterer, say)")
	}
	o := options{version: "unknown", commit: "unknown"}
	for _, opt := range opts {
		opt(&o)
	}
	p := &Prometheus{
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pollworker_build_info", Help: "Always 1; the labels say which build this worker runs."},
			[]string{"version", "commit"}),
		leaseEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pollworker_lease_events_total",
			Help: "Lease state changes: event is acquired, released, lost, uncertain or recovered; reason is a fixed category."},
			[]string{"event", "reason"}),
		renewed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pollworker_leases_renewed_total", Help: "Leases renewed."}),
		renewRoundTrip: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pollworker_renew_round_trip_seconds", Help: "Round trip of one renewal cycle (all leases, one pipeline).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pollworker_sessions",
			Help: "Sessions in this worker's view (its planned buckets and the sessions it polls), by state; the states do not overlap: " +
				"owned (it holds the lease and polls), pending (active and planned here, lease not held yet), malformed (entries it cannot decode). " +
				"Each worker counts its own view."},
			[]string{"state"}),
		liveNodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pollworker_live_nodes", Help: "Live workers in the last membership view."}),
		memberChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pollworker_membership_changes_total", Help: "Rounds that saw a new set of live workers."}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pollworker_polls_total", Help: "Polls by outcome: ok, error, cancelled, panic or no_capacity (not sent for want of a slot of the host: no failure)."},
			[]string{"outcome"}),
		pollDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pollworker_poll_duration_seconds", Help: "Duration of one poll.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pollworker_redis_errors_total", Help: "Failed Redis operations by operation."},
			[]string{"op"}),
		handoffGap: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pollworker_handoff_gap_seconds",
			Help: "Time a session went unpolled across a graceful handoff: from the previous holder's release to this worker's first poll.",
			// 1ms to ~33s: a prompt handoff takes milliseconds, a missed
			// event waits for the next round (seconds).
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		badData: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pollworker_bad_data_total",
			Help: "Bad records found and worked around, each counted once (when it is logged), by kind: " +
				"state (a corrupt session state, polled as never saved), member (a node index entry that is not a live worker, ignored)."},
			[]string{"kind"}),
	}
	p.slots = newSlotMetrics()
	// Counted from the poll loops at each scrape (Watch), not set by
	// rounds: a round that fails (Redis slow or away) never came to say
	// that leases were lost meanwhile.
	p.leasesHeld = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pollworker_leases_held", Help: "Leases this worker holds with a running poll loop, counted at scrape time."},
		func() float64 {
			if src := p.source.Load(); src != nil {
				return float64((*src).PollStats().LeasesHeld)
			}
			return 0
		})
	for _, c := range []prometheus.Collector{p.buildInfo, p.leasesHeld, p.leaseEvents, p.renewed, p.renewRoundTrip,
		p.sessions, p.liveNodes, p.memberChanges, p.polls, p.pollDuration, p.redisErrors, p.handoffGap, p.badData,
		p.slots.lateness, p.slots.skipped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	p.buildInfo.WithLabelValues(o.version, o.commit).Set(1)
	for _, l := range leaseEventLabels {
		p.leaseEvents.WithLabelValues(l[0], l[1])
	}
	for _, op := range RedisOps {
		p.redisErrors.WithLabelValues(op)
	}
	p.pollsBy = make(map[string]prometheus.Counter, len(PollOutcomes))
	for _, out := range PollOutcomes {
		p.pollsBy[out] = p.polls.WithLabelValues(out)
	}
	for _, st := range SessionStates {
		p.sessions.WithLabelValues(st)
	}
	for _, k := range []string{poller.BadDataState, poller.BadDataMember} {
		p.badData.WithLabelValues(k)
	}
	return p, nil
}

// Watch makes the gauges counted at scrape time (pollworker_leases_held)
// read src; they read 0 until it is called. Call it once the Coordinator
// that reports to p exists.
func (p *Prometheus) Watch(src Source) { p.source.Store(&src) }

// LeaseEvent implements poller.Observer.
func (p *Prometheus) LeaseEvent(e poller.Event) {
	p.leaseEvents.WithLabelValues(string(e.Type), ReasonCategory(e.Reason)).Inc()
}

// RenewCycle implements poller.Observer.
func (p *Prometheus) RenewCycle(r poller.RenewReport) {
	p.renewRoundTrip.Observe(r.RoundTrip.Seconds())
	p.renewed.Add(float64(r.Renewed))
}

// PollDone implements poller.Observer.
func (p *Prometheus) PollDone(r poller.PollReport) {
	c, ok := p.pollsBy[r.Outcome] // read only after New
	if !ok {
		c = p.polls.WithLabelValues(r.Outcome)
	}
	c.Inc()
	p.pollDuration.Observe(r.Duration.Seconds())
}

// Round implements poller.Observer.
func (p *Prometheus) Round(r poller.RoundReport) {
	p.liveNodes.Set(float64(r.Members))
	// Sessions (active, in this worker's view) includes the owned ones.
	p.sessions.WithLabelValues("owned").Set(float64(r.Owned))
	p.sessions.WithLabelValues("pending").Set(float64(max(r.Sessions-r.Owned, 0)))
	p.sessions.WithLabelValues("malformed").Set(float64(r.Malformed))
	if r.MembershipChanged {
		p.memberChanges.Inc()
	}
}

// RedisError implements poller.Observer.
func (p *Prometheus) RedisError(op string) { p.redisErrors.WithLabelValues(op).Inc() }

// HandoffGap implements poller.Observer.
func (p *Prometheus) HandoffGap(d time.Duration) { p.handoffGap.Observe(d.Seconds()) }

// BadData implements poller.Observer.
func (p *Prometheus) BadData(kind string) { p.badData.WithLabelValues(kind).Inc() }

// ReasonCategory maps a lease reason to a label value from a fixed set, so
// that error texts never become label values.
func ReasonCategory(reason string) string {
	switch {
	case reason == "":
		return "none"
	case reason == "deadline passed":
		return "deadline"
	case reason == "not owner":
		return "not_owner"
	case strings.HasPrefix(reason, "renew failed"):
		return "renew_error"
	case strings.Contains(reason, "past deadline"):
		return "late_reply"
	case reason == "released":
		return "released"
	}
	return "other"
}
