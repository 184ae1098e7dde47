// Package metrics exports a worker's measurements as Prometheus metrics.
//
// Prometheus implements poller.Observer. Every name has the pollworker_
// prefix; label values are drawn from small fixed sets (no session ids), so
// the number of series does not grow with the number of sessions.
package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pollworker/pollworker/poller"
)

// Prometheus holds the collectors of one worker.
type Prometheus struct {
	leasesHeld     prometheus.Gauge
	leaseEvents    *prometheus.CounterVec
	renewed        prometheus.Counter
	renewRoundTrip prometheus.Histogram
	sessions       *prometheus.GaugeVec
	liveNodes      prometheus.Gauge
	memberChanges  prometheus.Counter
	polls          *prometheus.CounterVec
	pollDuration   prometheus.Histogram
	redisErrors    *prometheus.CounterVec
	handoffGap     prometheus.Histogram
}

var _ poller.Observer = (*Prometheus)(nil)

// New creates the collectors and registers them with reg.
func New(reg prometheus.Registerer) (*Prometheus, error) {
	p := &Prometheus{
		leasesHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pollworker_leases_held", Help: "Leases this worker holds with a running poll loop."}),
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
			Name: "pollworker_sessions", Help: "Sessions seen by this worker: state is active, owned or malformed."},
			[]string{"state"}),
		liveNodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pollworker_live_nodes", Help: "Live workers in the last membership view."}),
		memberChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pollworker_membership_changes_total", Help: "Rounds that saw a new set of live workers."}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pollworker_polls_total", Help: "Polls by outcome: ok, error, cancelled or panic."},
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
	}
	for _, c := range []prometheus.Collector{p.leasesHeld, p.leaseEvents, p.renewed, p.renewRoundTrip,
		p.sessions, p.liveNodes, p.memberChanges, p.polls, p.pollDuration, p.redisErrors, p.handoffGap} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// LeaseEvent implements poller.Observer.
func (p *Prometheus) LeaseEvent(t poller.EventType, reason string) {
	p.leaseEvents.WithLabelValues(string(t), ReasonCategory(reason)).Inc()
}

// RenewCycle implements poller.Observer.
func (p *Prometheus) RenewCycle(roundTrip time.Duration, renewed, _, _ int) {
	p.renewRoundTrip.Observe(roundTrip.Seconds())
	p.renewed.Add(float64(renewed))
}

// PollDone implements poller.Observer.
func (p *Prometheus) PollDone(d time.Duration, outcome string) {
	p.polls.WithLabelValues(outcome).Inc()
	p.pollDuration.Observe(d.Seconds())
}

// Round implements poller.Observer.
func (p *Prometheus) Round(members, sessions, owned, malformed int, membershipChanged bool) {
	p.liveNodes.Set(float64(members))
	p.sessions.WithLabelValues("active").Set(float64(sessions))
	p.sessions.WithLabelValues("owned").Set(float64(owned))
	p.sessions.WithLabelValues("malformed").Set(float64(malformed))
	p.leasesHeld.Set(float64(owned))
	if membershipChanged {
		p.memberChanges.Inc()
	}
}

// RedisError implements poller.Observer.
func (p *Prometheus) RedisError(op string) { p.redisErrors.WithLabelValues(op).Inc() }

// HandoffGap implements poller.Observer.
func (p *Prometheus) HandoffGap(d time.Duration) { p.handoffGap.Observe(d.Seconds()) }

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
