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
