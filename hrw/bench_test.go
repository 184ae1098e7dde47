package hrw

import (
	"testing"

	rendezvous "github.com/dgryski/go-rendezvous"
)

const benchNodes = 100

// reportPairs reports the time per (key, node) pair, given pairs per op.
func reportPairs(b *testing.B, pairsPerOp int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(pairsPerOp), "ns/pair")
}

var sinkString string

func BenchmarkOwner(b *testing.B) {
	tb := NewIDs(nodeIDs("worker", benchNodes)...)
	keys := uuidKeys(1024, 1)
	i := 0
	for b.Loop() {
		sinkString, _ = tb.Owner(keys[i&1023])
		i++
	}
	reportPairs(b, benchNodes)
}

func BenchmarkAssign(b *testing.B) {
	ids := nodeIDs("worker", benchNodes)
	nodes := make([]Node, len(ids))
	for i, id := range ids {
		nodes[i] = Node{ID: id, Weight: 1 + float64(i%2)}
	}
	weightedTable, err := New(nodes...)
	if err != nil {
		b.Fatal(err)
	}
	tables := []struct {
		name string
		give *Table
	}{
		{"unweighted", NewIDs(ids...)},
		{"weighted", weightedTable},
	}
	keys := uuidKeys(100_000, 1)
	for _, tt := range tables {
		b.Run(tt.name, func(b *testing.B) {
			out := make([]int, len(keys))
			for b.Loop() {
				out = tt.give.Assign(keys, out)
			}
			reportPairs(b, len(keys)*benchNodes)
		})
	}
}

// BenchmarkNaiveFNVConcat scores each pair by FNV-1a over the node id and
// then the key, as if hashing the concatenated string: every pair rehashes
// both strings.
func BenchmarkNaiveFNVConcat(b *testing.B) {
	ids := nodeIDs("worker", benchNodes)
	keys := uuidKeys(1024, 1)
	i := 0
	for b.Loop() {
		key := keys[i&1023]
		var best uint64
		for _, id := range ids {
			h := uint64(fnvOffset64)
			for j := 0; j < len(id); j++ {
				h ^= uint64(id[j])
				h *= fnvPrime64
			}
			for j := 0; j < len(key); j++ {
				h ^= uint64(key[j])
				h *= fnvPrime64
			}
			if h > best {
				best, sinkString = h, id
			}
		}
		i++
	}
	reportPairs(b, benchNodes)
}

func BenchmarkGoRendezvous(b *testing.B) {
	r := rendezvous.New(nodeIDs("worker", benchNodes), HashKey)
	keys := uuidKeys(1024, 1)
	i := 0
	for b.Loop() {
		sinkString = r.Lookup(keys[i&1023])
		i++
	}
	reportPairs(b, benchNodes)
}
