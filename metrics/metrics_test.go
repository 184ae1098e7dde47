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
