package hrw

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// refRank computes every node's score for key straight from the formula in
// the package doc, using hash/fnv, and returns the ids best first.
func refRank(key string, nodes []Node) []string {
	fnv64a := func(s string) uint64 {
		h := fnv.New64a()
		h.Write([]byte(s))
		return h.Sum64()
	}
	mix := func(x uint64) uint64 {
		x ^= x >> 33
		x *= 0xff51afd7ed558ccd
		x ^= x >> 33
		x *= 0xc4ceb93e185ec53
		x ^= x >> 33
		return x
	}
	useWeights := false
	for _, n := range nodes {
		useWeights = useWeights || n.Weight != nodes[0].Weight
	}
	type scored struct {
		id    string
		score uint64
		f     float64
	}
	var ss []scored
	for _, n := range nodes {
		s := mix(fnv64a(key) ^ mix(fnv64a(n.ID)))
		u := (float64(s>>12) + 0.5) / math.Exp2(52)
		ss = append(ss, scored{n.ID, s, -n.Weight / math.Log(u)})
	}
	sort.Slice(ss, func(i, j int) bool {
		a, b := ss[i], ss[j]
		if useWeights && a.f != b.f {
			return a.f > b.f
		}
		if !useWeights && a.score != b.score {
			return a.score > b.score
		}
		return a.id < b.id
	})
	ids := make([]string, len(ss))
	for i, s := range ss {
		ids[i] = s.id
	}
	return ids
}

func nodeIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return ids
}

func seqKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("session-%d", i+1)
	}
	return keys
}

// uuidKeys returns n random UUID-like (version 4 layout) ids from a fixed seed.
func uuidKeys(n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	keys := make([]string, n)
	for i := range keys {
		a, b := r.Uint64(), r.Uint64()
		a = a&^0xf000 | 0x4000     // version 4
		b = b&^(0xc<<60) | 0x8<<60 // RFC 4122 variant
		keys[i] = fmt.Sprintf("%08x-%04x-%04x-%04x-%012x",
			a>>32, a>>16&0xffff, a&0xffff, b>>48, b&0xffffffffffff)
	}
	return keys
}

func mustNew(t *testing.T, nodes ...Node) *Table {
	t.Helper()
	tb, err := New(nodes...)
	require.NoError(t, err)
	return tb
}

func TestEmptyTable(t *testing.T) {
	empty, err := New()
	require.NoError(t, err)
	tables := []struct {
		name string
		give *Table
	}{
		{"nil", nil},
		{"zero", &Table{}},
		{"New()", empty},
		{"NewIDs()", NewIDs()},
	}
	for _, tt := range tables {
		t.Run(tt.name, func(t *testing.T) {
			tb := tt.give
			require.Equal(t, 0, tb.Len())
			require.Empty(t, tb.Nodes())
			id, ok := tb.Owner("session-1")
			require.False(t, ok)
			require.Empty(t, id)
			require.Equal(t, -1, tb.OwnerOfHash(HashKey("session-1")))
			require.Nil(t, tb.Rank("session-1", 3))
			require.Equal(t, []int{-1, -1}, tb.Assign([]string{"a", "b"}, nil))
			require.Empty(t, tb.Assign(nil, nil))
		})
	}
	require.Equal(t, "", Owner("session-1", nil))
}

func TestOneNode(t *testing.T) {
	for _, tb := range []*Table{NewIDs("only"), mustNew(t, Node{ID: "only", Weight: 7})} {
		for _, key := range []string{"", "a", "session-1"} {
			id, ok := tb.Owner(key)
			require.True(t, ok)
			require.Equal(t, "only", id)
			require.Equal(t, []string{"only"}, tb.Rank(key, 5))
		}
	}
	require.Equal(t, "only", Owner("x", []string{"only"}))
}

func TestDuplicateIDs(t *testing.T) {
	tb := NewIDs("b", "a", "b", "c", "a")
	require.Equal(t, []string{"a", "b", "c"}, tb.Nodes())
	require.Equal(t, 3, tb.Len())
	want := NewIDs("a", "b", "c")
	for _, key := range seqKeys(1000) {
		got, _ := tb.Owner(key)
		w, _ := want.Owner(key)
		require.Equal(t, w, got, key)
		require.Equal(t, w, Owner(key, []string{"c", "a", "a", "b"}), key)
	}

	// Duplicates in New keep the largest weight, whatever the order.
	x := mustNew(t, Node{"a", 1}, Node{"b", 3}, Node{"b", 0}, Node{"c", 1})
	y := mustNew(t, Node{"c", 1}, Node{"b", 0}, Node{"a", 1}, Node{"b", 3})
	z := mustNew(t, Node{"a", 1}, Node{"b", 3}, Node{"c", 1})
	require.Equal(t, z, x)
	require.Equal(t, z, y)
	// Duplicates that leave all weights equal use the integer score.
	require.Equal(t, NewIDs("a", "b"), mustNew(t, Node{"a", 2}, Node{"b", 1}, Node{"b", 2}))
}

func TestEmptyKeyAndID(t *testing.T) {
	tb := NewIDs("", "n1", "n2")
	require.Equal(t, []string{"", "n1", "n2"}, tb.Nodes())
	id, ok := tb.Owner("")
	require.True(t, ok)
	require.Equal(t, refRank("", []Node{{"", 1}, {"n1", 1}, {"n2", 1}})[0], id)
	require.Equal(t, id, Owner("", []string{"n2", "", "n1"}))
}

func TestNewWeights(t *testing.T) {
	tests := []struct {
		name    string
		give    float64
		wantErr bool
	}{
		{"zero means one", 0, false},
		{"negative zero means one", math.Copysign(0, -1), false},
		{"tiny", 1e-9, false},
		{"large", 1e9, false},
		{"negative", -1, true},
		{"NaN", math.NaN(), true},
		{"+Inf", math.Inf(1), true},
		{"-Inf", math.Inf(-1), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb, err := New(Node{"a", 1}, Node{"b", tt.give})
			if tt.wantErr {
				require.True(t, errors.Is(err, ErrInvalidWeight), "got %v", err)
				require.ErrorContains(t, err, `"b"`)
				require.Nil(t, tb)
				return
			}
			require.NoError(t, err)
			require.Equal(t, 2, tb.Len())
		})
	}
	// Equal weights, whatever their value, give the unweighted table.
	require.Equal(t, NewIDs("a", "b"), mustNew(t, Node{"a", 5}, Node{"b", 5}))
	require.Equal(t, NewIDs("a", "b"), mustNew(t, Node{"a", 0}, Node{"b", 1}))
}

func TestOrderIndependence(t *testing.T) {
	ids := nodeIDs("worker", 20)
	nodes := make([]Node, len(ids))
	for i, id := range ids {
		nodes[i] = Node{ID: id, Weight: float64(1 + i%3)}
	}
	keys := append(seqKeys(2000), uuidKeys(2000, 7)...)
	wantU, wantW := NewIDs(ids...), mustNew(t, nodes...)
	r := rand.New(rand.NewPCG(3, 4))
	for range 5 {
		r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		gotU, gotW := NewIDs(ids...), mustNew(t, nodes...)
		require.Equal(t, wantU.Nodes(), gotU.Nodes())
		require.True(t, slices.IsSorted(gotU.Nodes()))
		require.Equal(t, wantU.Assign(keys, nil), gotU.Assign(keys, nil))
		require.Equal(t, wantW.Assign(keys, nil), gotW.Assign(keys, nil))
		for _, key := range keys[:200] {
			require.Equal(t, wantU.Rank(key, 3), gotU.Rank(key, 3))
			require.Equal(t, wantW.Rank(key, 3), gotW.Rank(key, 3))
			want, _ := wantU.Owner(key)
			require.Equal(t, want, Owner(key, ids))
		}
	}
}

func TestMatchesReference(t *testing.T) {
	ids := nodeIDs("worker", 12)
	unweighted := make([]Node, len(ids))
	weightedNodes := make([]Node, len(ids))
	for i, id := range ids {
		unweighted[i] = Node{ID: id, Weight: 1}
		weightedNodes[i] = Node{ID: id, Weight: []float64{1, 0.5, 2, 3.25}[i%4]}
	}
	tests := []struct {
		name string
		give []Node
	}{
		{"unweighted", unweighted},
		{"weighted", weightedNodes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := mustNew(t, tt.give...)
			for _, key := range append(seqKeys(500), uuidKeys(500, 11)...) {
				want := refRank(key, tt.give)
				require.Equal(t, want, tb.Rank(key, len(ids)), key)
				require.Equal(t, want[:3], tb.Rank(key, 3), key)
				got, ok := tb.Owner(key)
				require.True(t, ok)
				require.Equal(t, want[0], got, key)
			}
		})
	}
}

func TestAssignMatchesOwner(t *testing.T) {
	keys := append(seqKeys(5000), uuidKeys(5000, 5)...)
	keys = append(keys, "")
	ids := nodeIDs("worker", 37)
	weightedNodes := make([]Node, len(ids))
	for i, id := range ids {
		weightedNodes[i] = Node{ID: id, Weight: 1 + float64(i%4)/2}
	}
	tables := []struct {
		name string
		give *Table
	}{
		{"unweighted", NewIDs(ids...)},
		{"weighted", mustNew(t, weightedNodes...)},
	}
	for _, tt := range tables {
		t.Run(tt.name, func(t *testing.T) {
			tb := tt.give
			buf := make([]int, 3, len(keys)+10)
			out := tb.Assign(keys, buf)
			require.Len(t, out, len(keys))
			require.Same(t, &buf[:1][0], &out[0], "out was not reused")
			for i, key := range keys {
				want, _ := tb.Owner(key)
				require.Equal(t, want, tb.ID(out[i]), key)
				require.Equal(t, tb.OwnerOfHash(HashKey(key)), out[i], key)
				require.Equal(t, want, tb.Nodes()[out[i]], key)
			}
			// Too small a buffer is replaced.
			small := make([]int, 1)
			require.Equal(t, out, tb.Assign(keys, small))
		})
	}
}

func TestAssignLengths(t *testing.T) {
	// Assign scores keys four at a time; cover every remainder.
	tb := NewIDs(nodeIDs("worker", 9)...)
	keys := uuidKeys(13, 8)
	for n := range len(keys) + 1 {
		out := tb.Assign(keys[:n], nil)
		require.Len(t, out, n)
		for i, key := range keys[:n] {
			require.Equal(t, tb.OwnerOfHash(HashKey(key)), out[i], "n=%d i=%d", n, i)
		}
	}
}

func TestRank(t *testing.T) {
	tb := NewIDs(nodeIDs("worker", 10)...)
	for _, key := range seqKeys(300) {
		all := tb.Rank(key, 10)
		require.Len(t, all, 10)
		require.ElementsMatch(t, tb.Nodes(), all)
		owner, _ := tb.Owner(key)
		require.Equal(t, owner, all[0])
		for n := 1; n <= 10; n++ {
			require.Equal(t, all[:n], tb.Rank(key, n))
		}
		require.Equal(t, all, tb.Rank(key, 11))
		// The runner-up is who owns the key once the owner leaves.
		rest := NewIDs(slices.DeleteFunc(tb.Nodes(), func(id string) bool { return id == owner })...)
		next, _ := rest.Owner(key)
		require.Equal(t, all[1], next)
	}
	require.Nil(t, tb.Rank("k", 0))
	require.Nil(t, tb.Rank("k", -1))
}

func TestTiesGoToSmallerID(t *testing.T) {
	// Equal node hashes force equal scores for every key.
	h := hashNode("x")
	tests := []struct {
		name string
		give *Table
	}{
		{"unweighted", &Table{ids: []string{"a", "b", "c"}, hashes: []uint64{h, h, h}}},
		{"weighted", &Table{ids: []string{"a", "b", "c"}, hashes: []uint64{h, h, h}, weight: []float64{2, 2, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, key := range []string{"", "x", "session-1"} {
				id, _ := tt.give.Owner(key)
				require.Equal(t, "a", id)
				require.Equal(t, []string{"a", "b", "c"}, tt.give.Rank(key, 3))
				require.Equal(t, []string{"a", "b"}, tt.give.Rank(key, 2))
				require.Equal(t, []int{0}, tt.give.Assign([]string{key}, nil))
			}
		})
	}
}

func TestZeroAllocs(t *testing.T) {
	ids := nodeIDs("worker", 100)
	tb := NewIDs(ids...)
	wt := mustNew(t, Node{"a", 1}, Node{"b", 2}, Node{"c", 3})
	keys := seqKeys(1000)
	out := make([]int, len(keys))
	tests := []struct {
		name string
		give func()
	}{
		{"HashKey", func() { HashKey("session-12345") }},
		{"Owner", func() { tb.Owner("session-12345") }},
		{"Owner weighted", func() { wt.Owner("session-12345") }},
		{"OwnerOfHash", func() { tb.OwnerOfHash(12345) }},
		{"Assign", func() { out = tb.Assign(keys, out) }},
		{"Assign weighted", func() { out = wt.Assign(keys, out) }},
		{"package Owner", func() { Owner("session-12345", ids) }},
		{"ID", func() { tb.ID(3) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Zero(t, testing.AllocsPerRun(20, tt.give))
		})
	}
}
