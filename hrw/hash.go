package hrw

import "math"

// FNV-1a 64 parameters.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// HashKey returns the FNV-1a 64-bit hash of key's bytes: the session hash
// that every score of key is computed from (see OwnerOfHash).
func HashKey(key string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= fnvPrime64
	}
	return h
}

// hashNode returns the finalized hash of a node id.
func hashNode(id string) uint64 { return fmix64(HashKey(id)) }

// fmix64 is the 64-bit finalizer of MurmurHash3: a bijection whose output
// bits each depend on every input bit.
func fmix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb93e185ec53
	x ^= x >> 33
	return x
}

// weighted turns an integer score into the weighted score -w/ln(u) and
// returns its float64 bits. For the non-negative float64 values that occur
// here, the bits order exactly like the floats, so callers compare uint64s.
func weighted(score uint64, w float64) uint64 {
	// score>>12 < 2^52, so adding 0.5 and scaling by 2^-52 are exact and
	// u lies in [2^-53, 1-2^-53].
	u := (float64(score>>12) + 0.5) * (1.0 / (1 << 52))
	return math.Float64bits(-w / math.Log(u))
}

// Bucket returns the bucket of key among n buckets (n > 0): the finalized
// FNV-1a hash of key modulo n, evenly spread for sequential keys too.
func Bucket(key string, n int) int { return int(fmix64(HashKey(key)) % uint64(n)) }
