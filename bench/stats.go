package bench

import (
	"encoding/json"
	"math"
	"sort"
	"time"
)

// Summary is the median, 99th percentile and maximum of a set of samples.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	P99    float64 `json:"p99"`
	Max    float64 `json:"max"`
}

// Summarize sorts a copy of xs and returns its summary; percentiles use the
// nearest-rank method, so P99 of fewer than 100 samples is the maximum.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{Median: math.NaN(), P99: math.NaN(), Max: math.NaN()}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return Summary{N: len(s), Median: Percentile(s, 50), P99: Percentile(s, 99), Max: s[len(s)-1]}
}

// Percentile returns the p-th percentile (nearest rank) of sorted xs.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	r := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	r = max(0, min(r, len(sorted)-1))
	return sorted[r]
}

// Millis converts durations to float milliseconds.
func Millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// MarshalJSON writes NaN figures (no samples) as null.
func (s Summary) MarshalJSON() ([]byte, error) {
	f := func(x float64) any {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return x
	}
	return json.Marshal(struct {
		N      int `json:"n"`
		Median any `json:"median"`
		P99    any `json:"p99"`
		Max    any `json:"max"`
	}{s.N, f(s.Median), f(s.P99), f(s.Max)})
}
