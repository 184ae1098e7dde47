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
	p.LeaseEvent(poller.EventLost, "renew failed: boom")
	p.LeaseEvent(poller.EventAcquired, "")
	p.RenewCycle(3*time.Millisecond, 10, 0, 0)
	p.PollDone(20*time.Millisecond, "ok")
	p.PollDone(time.Millisecond, "panic")
	p.Round(3, 100, 33, 2, true)
	p.RedisError("renew")

	require.Equal(t, 1.0, testutil.ToFloat64(p.leaseEvents.WithLabelValues("lost", "renew_error")))
	require.Equal(t, 10.0, testutil.ToFloat64(p.renewed))
	require.Equal(t, 33.0, testutil.ToFloat64(p.leasesHeld))
	require.Equal(t, 1.0, testutil.ToFloat64(p.memberChanges))
	require.Equal(t, 1.0, testutil.ToFloat64(p.redisErrors.WithLabelValues("renew")))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pollworker_polls_total Polls by outcome: ok, error, cancelled or panic.
# TYPE pollworker_polls_total counter
pollworker_polls_total{outcome="ok"} 1
pollworker_polls_total{outcome="panic"} 1
`), "pollworker_polls_total"))
	_, err = New(reg)
	require.Error(t, err, "registering twice is refused")
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
