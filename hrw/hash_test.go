package hrw

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHashKeyPublishedVectors(t *testing.T) {
	// From the FNV reference test suite (Noll, fnv-1a 64-bit).
	tests := []struct {
		name string
		give string
		want uint64
	}{
		{"empty", "", 0xcbf29ce484222325},
		{"a", "a", 0xaf63dc4c8601ec8c},
		{"b", "b", 0xaf63df4c8601f1a5},
		{"foobar", "foobar", 0x85944171f73967e8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, HashKey(tt.give))
		})
	}
}

func TestHashKeyMatchesStdlib(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		h := fnv.New64a()
		h.Write(b)
		require.Equal(t, h.Sum64(), HashKey(string(b)), "key %x", b)
	}
}

func TestFmix64(t *testing.T) {
	require.Equal(t, uint64(0), fmix64(0))
	// A bijection cannot map two distinct inputs alike; spot-check nearby ones.
	seen := make(map[uint64]bool)
	for x := range uint64(1 << 12) {
		seen[fmix64(x)] = true
	}
	require.Len(t, seen, 1<<12)
}

func TestWeightedExtremes(t *testing.T) {
	tests := []struct {
		name  string
		score uint64
	}{
		{"zero", 0},
		{"one", 1},
		{"max", math.MaxUint64},
		{"middle", 1 << 63},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, w := range []float64{1e-300, 0.5, 1, 2, 1e6} {
				f := math.Float64frombits(weighted(tt.score, w))
				require.False(t, math.IsNaN(f) || math.IsInf(f, 0), "w=%v: %v", w, f)
				require.GreaterOrEqual(t, f, 0.0, "w=%v", w)
			}
		})
	}
	// Monotone in the score for a fixed weight, and in the weight.
	require.Less(t, weighted(1<<40, 1), weighted(1<<41, 1))
	require.Less(t, weighted(1<<40, 1), weighted(1<<40, 2))
	require.Less(t, weighted(math.MaxUint64-1<<12, 1), weighted(math.MaxUint64, 1))
}
