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

func TestSlotMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	p, err := New(reg)
	require.NoError(t, err)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pollworker_slots_skipped_total Slots of scheduled sessions not run, by reason: overlap (due while the previous poll ran), catchup (missed, and not run by the session's catch-up policy or outside its window).
# TYPE pollworker_slots_skipped_total counter
pollworker_slots_skipped_total{reason="catchup"} 0
pollworker_slots_skipped_total{reason="overlap"} 0
`), "pollworker_slots_skipped_total"), "exported at 0 from the start")

	p.SlotStarted(3 * time.Millisecond)
	p.SlotStarted(-time.Millisecond) // a clock step: counted as on time
	p.SlotsSkipped(2, poller.SkipOverlap)
	p.SlotsSkipped(5, poller.SkipCatchUp)
	require.Equal(t, 2, testutil.CollectAndCount(p.slots.skipped))
	require.Equal(t, 2.0, testutil.ToFloat64(p.slots.skipped.WithLabelValues("overlap")))
	require.Equal(t, 5.0, testutil.ToFloat64(p.slots.skipped.WithLabelValues("catchup")))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pollworker_slot_lateness_seconds For scheduled sessions: start of a slot's poll minus the slot's start (its time plus the session's jitter offset).
# TYPE pollworker_slot_lateness_seconds histogram
pollworker_slot_lateness_seconds_bucket{le="0.001"} 1
pollworker_slot_lateness_seconds_bucket{le="0.002"} 1
pollworker_slot_lateness_seconds_bucket{le="0.004"} 2
pollworker_slot_lateness_seconds_bucket{le="0.008"} 2
pollworker_slot_lateness_seconds_bucket{le="0.016"} 2
pollworker_slot_lateness_seconds_bucket{le="0.032"} 2
pollworker_slot_lateness_seconds_bucket{le="0.064"} 2
pollworker_slot_lateness_seconds_bucket{le="0.128"} 2
pollworker_slot_lateness_seconds_bucket{le="0.256"} 2
pollworker_slot_lateness_seconds_bucket{le="0.512"} 2
pollworker_slot_lateness_seconds_bucket{le="1.024"} 2
pollworker_slot_lateness_seconds_bucket{le="2.048"} 2
pollworker_slot_lateness_seconds_bucket{le="4.096"} 2
pollworker_slot_lateness_seconds_bucket{le="8.192"} 2
pollworker_slot_lateness_seconds_bucket{le="16.384"} 2
pollworker_slot_lateness_seconds_bucket{le="32.768"} 2
pollworker_slot_lateness_seconds_bucket{le="65.536"} 2
pollworker_slot_lateness_seconds_bucket{le="+Inf"} 2
pollworker_slot_lateness_seconds_sum 0.003
pollworker_slot_lateness_seconds_count 2
`), "pollworker_slot_lateness_seconds"))
}
