package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/poller"
)

func TestReasonCategory(t *testing.T) {
	tests := []struct{ give, want string }{
		{"", "none"},
		{"deadline passed", "deadline"},
		{"not owner", "not_owner"},
		{"renew failed: dial tcp 127.0.0.1:6379: connection refused", "renew_error"},
		{"renewed past deadline", "late_reply"},
		{"acquired past deadline", "late_reply"},
		{"released", "released"},
		{"anything else", "other"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) { require.Equal(t, tt.want, ReasonCategory(tt.give)) })
	}
}

func TestPrometheusRecords(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	p, err := New(reg)
	require.NoError(t, err)
	p.LeaseEvent(poller.Event{Type: poller.EventLost, Reason: "renew failed: boom"})
	p.LeaseEvent(poller.Event{Type: poller.EventAcquired})
	p.RenewCycle(poller.RenewReport{RoundTrip: 3 * time.Millisecond, Renewed: 10})
	p.PollDone(poller.PollReport{Duration: 20 * time.Millisecond, Outcome: "ok"})
	p.PollDone(poller.PollReport{Duration: time.Millisecond, Outcome: "panic"})
	p.Round(poller.RoundReport{Members: 3, Sessions: 100, Owned: 33, Malformed: 2, MembershipChanged: true})
	p.RedisError("renew")

	require.Equal(t, 1.0, testutil.ToFloat64(p.leaseEvents.WithLabelValues("lost", "renew_error")))
	require.Equal(t, 10.0, testutil.ToFloat64(p.renewed))
	require.Zero(t, testutil.ToFloat64(p.leasesHeld), "rounds do not set it (TestLeasesHeldCountedAtScrape)")
	require.Equal(t, 1.0, testutil.ToFloat64(p.memberChanges))
	require.Equal(t, 1.0, testutil.ToFloat64(p.redisErrors.WithLabelValues("renew")))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pollworker_polls_total Polls by outcome: ok, error, cancelled, panic or no_capacity (not sent for want of a slot of the host: no failure).
# TYPE pollworker_polls_total counter
pollworker_polls_total{outcome="cancelled"} 0
pollworker_polls_total{outcome="error"} 0
pollworker_polls_total{outcome="no_capacity"} 0
pollworker_polls_total{outcome="ok"} 1
pollworker_polls_total{outcome="panic"} 1
`), "pollworker_polls_total"))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pollworker_sessions Sessions in this worker's view (its planned buckets and the sessions it polls), by state; the states do not overlap: owned (it holds the lease and polls), pending (active and planned here, lease not held yet), malformed (entries it cannot decode). Each worker counts its own view.
# TYPE pollworker_sessions gauge
pollworker_sessions{state="malformed"} 2
pollworker_sessions{state="owned"} 33
pollworker_sessions{state="pending"} 67
`), "pollworker_sessions"))
	_, err = New(reg)
	require.Error(t, err, "registering twice is refused")
}

// fakeSource is a Source whose figures the test sets.
type fakeSource struct{ stats poller.PollStats }

func (f *fakeSource) PollStats() poller.PollStats { return f.stats }

// TestLeasesHeldCountedAtScrape (issue 22 item 12): pollworker_leases_held
// is what the worker holds at scrape time, whatever the rounds reported:
// rounds that fail (a slow Redis) never came to say the leases were lost.
func TestLeasesHeldCountedAtScrape(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	p, err := New(reg)
	require.NoError(t, err)
	src := &fakeSource{stats: poller.PollStats{LeasesHeld: 104}}
	p.Watch(src)
	p.Round(poller.RoundReport{Members: 3, Sessions: 300, Owned: 104}) // the last round that completed
	require.Equal(t, 104.0, testutil.ToFloat64(p.leasesHeld))
	src.stats.LeasesHeld = 0 // lost since, no round completed
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pollworker_leases_held Leases this worker holds with a running poll loop, counted at scrape time.
# TYPE pollworker_leases_held gauge
pollworker_leases_held 0
`), "pollworker_leases_held"))
}

// TestSeriesFromTheStart: build info is 1 with its labels, and every
// counter whose labels are known in advance is exported at 0 before the
// first event.
func TestSeriesFromTheStart(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	_, err := New(reg, WithBuildInfo("v1.2.3", "abc123"))
	require.NoError(t, err)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pollworker_build_info Always 1; the labels say which build this worker runs.
# TYPE pollworker_build_info gauge
pollworker_build_info{commit="abc123",version="v1.2.3"} 1
# HELP pollworker_lease_events_total Lease state changes: event is acquired, released, lost, uncertain or recovered; reason is a fixed category.
# TYPE pollworker_lease_events_total counter
pollworker_lease_events_total{event="acquired",reason="none"} 0
pollworker_lease_events_total{event="lost",reason="deadline"} 0
pollworker_lease_events_total{event="lost",reason="late_reply"} 0
pollworker_lease_events_total{event="lost",reason="not_owner"} 0
pollworker_lease_events_total{event="recovered",reason="none"} 0
pollworker_lease_events_total{event="released",reason="released"} 0
pollworker_lease_events_total{event="uncertain",reason="renew_error"} 0
# HELP pollworker_redis_errors_total Failed Redis operations by operation.
# TYPE pollworker_redis_errors_total counter
pollworker_redis_errors_total{op="acquire"} 0
pollworker_redis_errors_total{op="heartbeat"} 0
pollworker_redis_errors_total{op="members"} 0
pollworker_redis_errors_total{op="publish"} 0
pollworker_redis_errors_total{op="release"} 0
pollworker_redis_errors_total{op="renew"} 0
pollworker_redis_errors_total{op="sessions"} 0
pollworker_redis_errors_total{op="state"} 0
`), "pollworker_build_info", "pollworker_lease_events_total", "pollworker_redis_errors_total"))

	reg = prometheus.NewPedanticRegistry()
	_, err = New(reg)
	require.NoError(t, err)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pollworker_build_info Always 1; the labels say which build this worker runs.
# TYPE pollworker_build_info gauge
pollworker_build_info{commit="unknown",version="unknown"} 1
`), "pollworker_build_info"))
}

func TestHandoffGapHistogram(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	p, err := New(reg)
	require.NoError(t, err)
	p.HandoffGap(3 * time.Millisecond)
	p.HandoffGap(1500 * time.Millisecond)
	p.HandoffGap(time.Minute) // past the last bucket: +Inf only
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pollworker_handoff_gap_seconds Time a session went unpolled across a graceful handoff: from the previous holder's release to this worker's first poll.
# TYPE pollworker_handoff_gap_seconds histogram
pollworker_handoff_gap_seconds_bucket{le="0.001"} 0
pollworker_handoff_gap_seconds_bucket{le="0.002"} 0
pollworker_handoff_gap_seconds_bucket{le="0.004"} 1
pollworker_handoff_gap_seconds_bucket{le="0.008"} 1
pollworker_handoff_gap_seconds_bucket{le="0.016"} 1
pollworker_handoff_gap_seconds_bucket{le="0.032"} 1
pollworker_handoff_gap_seconds_bucket{le="0.064"} 1
pollworker_handoff_gap_seconds_bucket{le="0.128"} 1
pollworker_handoff_gap_seconds_bucket{le="0.256"} 1
pollworker_handoff_gap_seconds_bucket{le="0.512"} 1
pollworker_handoff_gap_seconds_bucket{le="1.024"} 1
pollworker_handoff_gap_seconds_bucket{le="2.048"} 2
pollworker_handoff_gap_seconds_bucket{le="4.096"} 2
pollworker_handoff_gap_seconds_bucket{le="8.192"} 2
pollworker_handoff_gap_seconds_bucket{le="16.384"} 2
pollworker_handoff_gap_seconds_bucket{le="32.768"} 2
pollworker_handoff_gap_seconds_bucket{le="+Inf"} 3
pollworker_handoff_gap_seconds_sum 61.503
pollworker_handoff_gap_seconds_count 3
`), "pollworker_handoff_gap_seconds"))
}

// TestNewNeedsARegisterer: a nil Registerer is an error, not a panic.
func TestNewNeedsARegisterer(t *testing.T) {
	_, err := New(nil)
	require.ErrorContains(t, err, "needs a prometheus.Registerer")
}
