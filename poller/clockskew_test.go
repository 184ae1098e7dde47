package poller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestSkewOf(t *testing.T) {
	before := time.UnixMilli(1_700_000_000_000)
	skew, unc := skewOf(before, before.Add(40*time.Millisecond), before.UnixMilli()-3000)
	require.Equal(t, 3020*time.Millisecond, skew, "the read's middle, 20 ms after before, is 3.02 s ahead")
	require.Equal(t, 21*time.Millisecond, unc)
	skew, _ = skewOf(before, before, before.UnixMilli()+500)
	require.Equal(t, -500*time.Millisecond, skew, "behind")
}

func TestClockSkewJudge(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	off := clockSkew{off: true, warned: 3 * s}
	for _, tt := range []struct {
		name       string
		from       clockSkew
		skew, unc  time.Duration
		want       clockSkew
		warn, back bool
	}{
		{"in step", clockSkew{}, 100 * ms, ms, clockSkew{}, false, false},
		{"off ahead", clockSkew{}, 3 * s, ms, off, true, false},
		{"off behind", clockSkew{}, -3 * s, ms, clockSkew{off: true, warned: -3 * s}, true, false},
		{"not surely off: the round trip could explain it", clockSkew{}, 2500 * ms, 600 * ms, clockSkew{}, false, false},
		{"still off: no second warning", off, 3500 * ms, ms, off, false, false},
		{"further off by another 2 s: warned again", off, 5500 * ms, ms, clockSkew{off: true, warned: 5500 * ms}, true, false},
		{"between: neither off nor surely back", off, 1500 * ms, ms, off, false, false},
		{"back", off, 200 * ms, ms, clockSkew{}, false, true},
		{"back, but the round trip keeps it uncertain", off, 200 * ms, 900 * ms, off, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, warn, back := tt.from.judge(tt.skew, tt.unc)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.warn, warn)
			require.Equal(t, tt.back, back)
		})
	}
}

// TestNoteClockLogsOnceEachWay: a worker whose clock is 10 s ahead of
// Redis's warns once, not at every round, and says when it is back.
func TestNoteClockLogsOnceEachWay(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	v := &view{log: zap.New(core)}
	now := time.UnixMilli(1_700_000_000_000)
	for range 3 {
		v.noteClock(now, now.Add(time.Millisecond), now.UnixMilli()-10_000)
	}
	require.Equal(t, 1, logs.FilterMessageSnippet("wall clock differs from Redis's").Len())
	v.noteClock(now, now.Add(time.Millisecond), now.UnixMilli())
	require.Equal(t, 1, logs.FilterMessageSnippet("agrees with Redis's again").Len())
	require.Equal(t, 2, logs.Len())
	v.noteClock(now, now, 0) // no server time read: nothing judged
	require.Equal(t, 2, logs.Len())
}
