package bench

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		give []float64
		want Summary
	}{
		{name: "one", give: []float64{3}, want: Summary{N: 1, Median: 3, P99: 3, Max: 3}},
		{name: "unsorted", give: []float64{5, 1, 3}, want: Summary{N: 3, Median: 3, P99: 5, Max: 5}},
		{name: "hundred", give: seq(100), want: Summary{N: 100, Median: 50, P99: 99, Max: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Summarize(tt.give))
		})
	}
	require.True(t, Summarize(nil).Median != Summarize(nil).Median, "empty summary is NaN")
}

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}

func TestRecorderWatch(t *testing.T) {
	r := NewRecorder()
	r.Poll("a", "w0")
	r.Poll("b", "w1")
	require.Equal(t, 2, r.Polled())
	done := r.Watch(time.Now(), map[string]string{"a": "w0"}, "")
	r.Poll("a", "w0") // the old owner does not count
	select {
	case <-done:
		t.Fatal("done before the successor polled")
	default:
	}
	r.Poll("a", "w2")
	<-done
	gaps, holes, missing := r.Gaps()
	require.Len(t, gaps, 1)
	require.Len(t, holes, 1)
	require.Zero(t, missing)
	require.Equal(t, map[string]string{"a": "w2", "b": "w1"}, r.Owners())
}

func TestSummaryJSONNaN(t *testing.T) {
	b, err := json.Marshal(Summarize(nil))
	require.NoError(t, err)
	require.JSONEq(t, `{"n":0,"median":null,"p99":null,"max":null}`, string(b))
}

func TestRecorderFirstPolls(t *testing.T) {
	r := NewRecorder()
	t0 := time.Now()
	all := r.WaitPolled(4)
	for _, s := range []string{"a", "b", "a", "c"} {
		r.Poll(s, "w0")
	}
	at, last := r.FirstPolls(t0, 4, []float64{0.5, 0.75, 1}, 2)
	require.Len(t, at, 3)
	require.GreaterOrEqual(t, at[0], time.Duration(0), "2 of 4 polled")
	require.GreaterOrEqual(t, at[1], at[0], "3 of 4 polled, not before 2")
	require.Equal(t, time.Duration(-1), at[2], "the fourth was never polled")
	require.Len(t, last, 2)
	require.Contains(t, last[0], "b by w0")
	require.Contains(t, last[1], "c by w0")
	r.Poll("d", "w1")
	<-all
	at, last = r.FirstPolls(t0, 4, []float64{1}, 10)
	require.GreaterOrEqual(t, at[0], time.Duration(0))
	require.Len(t, last, 4)
	require.Contains(t, last[3], "d by w1")
}
