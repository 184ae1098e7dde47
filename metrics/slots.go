package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pollworker/pollworker/poller"
)

// slotMetrics are the metrics of scheduled sessions (Observer.SlotStarted,
// SlotsSkipped).
type slotMetrics struct {
	lateness prometheus.Histogram
	skipped  *prometheus.CounterVec
}

func newSlotMetrics() slotMetrics {
	m := slotMetrics{
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pollworker_slot_lateness_seconds",
			Help: "For scheduled sessions: start of a slot's poll minus the slot's start (its time plus the session's jitter offset).",
			// 1 ms to ~65 s: on time is milliseconds, a failover the lease TTL.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 17)}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pollworker_slots_skipped_total",
			Help: "Slots of scheduled sessions not run, by reason: overlap (due while the previous poll ran), " +
				"catchup (missed, and not run by the session's catch-up policy or outside its window)."},
			[]string{"reason"}),
	}
	for _, r := range []string{poller.SkipOverlap, poller.SkipCatchUp} {
		m.skipped.WithLabelValues(r)
	}
	return m
}

// SlotStarted implements poller.Observer.
func (p *Prometheus) SlotStarted(lateness time.Duration) {
	p.slots.lateness.Observe(max(lateness, 0).Seconds())
}

// SlotsSkipped implements poller.Observer.
func (p *Prometheus) SlotsSkipped(n int, reason string) {
	p.slots.skipped.WithLabelValues(reason).Add(float64(n))
}
