package poller

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/hrw"
)

func TestSpreadStep(t *testing.T) {
	const iv = time.Second
	phase := time.Duration(hrw.Bucket("s", int(iv)))
	onPhase := time.Unix(1000, 0).Add(phase)
	tests := []struct {
		name string
		give time.Time
		want time.Duration
	}{
		{"on its phase", onPhase, 0},
		{"a little before it: moved onto it", onPhase.Add(-30 * time.Millisecond), 30 * time.Millisecond},
		{"far before it: one capped step", onPhase.Add(-600 * time.Millisecond), iv / 10},
		{"just after it: one capped step toward the next", onPhase.Add(time.Millisecond), iv / 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, SpreadStep("s", iv, tt.give))
		})
	}
	hourPhase := time.Unix(0, 0).Add(time.Duration(hrw.Bucket("s", int(time.Hour))))
	require.Equal(t, 6*time.Minute, SpreadStep("s", time.Hour, hourPhase.Add(-30*time.Minute)), "a tenth of a long interval too")
	require.Zero(t, SpreadStep("s", 0, onPhase))
}

// TestSpreadStepSpreadsSessionsStartedTogether: 500 sessions whose first
// polls all came at the same instant (a start, a takeover) arrive spread
// over the interval after a dozen polls, whatever the interval, and no
// interval between two polls of a session is shorter than the interval or
// longer than one step more. (At 1 min, with the step capped at 200 ms,
// they were still in one burst after a dozen polls.)
func TestSpreadStepSpreadsSessionsStartedTogether(t *testing.T) {
	for _, iv := range []time.Duration{time.Second, time.Minute, time.Hour} {
		t.Run(iv.String(), func(t *testing.T) { spreadsStartedTogether(t, iv) })
	}
}

func spreadsStartedTogether(t *testing.T, iv time.Duration) {
	const n = 500
	t0 := time.Unix(2000, 0)
	next := make([]time.Time, n)
	for i := range next {
		next[i] = t0
	}
	busiest := func() int {
		slots := map[int64]int{}
		mx := 0
		for _, at := range next {
			k := (at.UnixNano() % int64(iv)) / int64(iv/100)
			slots[k]++
			mx = max(mx, slots[k])
		}
		return mx
	}
	require.Equal(t, n, busiest())
	for range 12 {
		for i := range next {
			id := fmt.Sprintf("sess-%d", i)
			prev := next[i]
			next[i] = prev.Add(iv).Add(SpreadStep(id, iv, prev.Add(iv)))
			gap := next[i].Sub(prev)
			require.GreaterOrEqual(t, gap, iv)
			require.LessOrEqual(t, gap, iv+iv/10)
		}
	}
	// 500 over 100 slots of a hundredth of the interval: 5 each on
	// average; random phases put at most about 13 in one.
	require.LessOrEqual(t, busiest(), 15, "spread over the interval")
}
