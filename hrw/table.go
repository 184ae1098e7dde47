package hrw

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrInvalidWeight is returned (wrapped) by New for a weight that is
// negative, NaN or infinite.
var ErrInvalidWeight = errors.New("hrw: weight must be finite and not negative")

// Node is a member of a Table.
type Node struct {
	// ID identifies the node; it is hashed as raw bytes.
	ID string
	// Weight is the node's relative share of keys; 0 means 1.
	Weight float64
}

// Table is an immutable rendezvous table over a set of nodes, sorted by id.
// The zero value and nil are empty tables.
type Table struct {
	ids    []string
	hashes []uint64  // hashNode(ids[i])
	weight []float64 // nil when all weights are equal
}

// New returns a Table over nodes. Nodes with the same id collapse to one
// that keeps the largest of their weights, so the result never depends on
// the order of nodes. It fails only for an invalid weight.
func New(nodes ...Node) (*Table, error) {
	ns := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		w := n.Weight
		if w == 0 {
			w = 1
		}
		if !(w > 0) || math.IsInf(w, 1) {
			return nil, fmt.Errorf("%w: node %q has weight %v", ErrInvalidWeight, n.ID, n.Weight)
		}
		ns = append(ns, Node{ID: n.ID, Weight: w})
	}
	slices.SortFunc(ns, func(a, b Node) int {
		// Largest weight first among equal ids, so Compact keeps it.
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(b.Weight, a.Weight))
	})
	ns = slices.CompactFunc(ns, func(a, b Node) bool { return a.ID == b.ID })

	t := &Table{ids: make([]string, len(ns)), hashes: make([]uint64, len(ns))}
	equal := true
	for i, n := range ns {
		t.ids[i] = n.ID
		t.hashes[i] = hashNode(n.ID)
		equal = equal && n.Weight == ns[0].Weight
	}
	if !equal {
		t.weight = make([]float64, len(ns))
		for i, n := range ns {
			t.weight[i] = n.Weight
		}
	}
	return t, nil
}

// NewIDs returns a Table over equally weighted nodes with the given ids;
// duplicate ids collapse to one.
func NewIDs(ids ...string) *Table {
	s := slices.Clone(ids)
	slices.Sort(s)
	s = slices.Compact(s)
	t := &Table{ids: s, hashes: make([]uint64, len(s))}
	for i, id := range s {
		t.hashes[i] = hashNode(id)
	}
	return t
}

// Len returns the number of distinct nodes.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.ids)
}

// Nodes returns a copy of the node ids in table order (sorted by id); the
// indexes returned by OwnerOfHash and Assign point into it.
func (t *Table) Nodes() []string {
	if t == nil {
		return nil
	}
	return slices.Clone(t.ids)
}

// ID returns the id of the node at index i of Nodes without copying them.
// It panics if i is out of range, as indexing Nodes would.
func (t *Table) ID(i int) string { return t.ids[i] }

// Owner returns the id of the node that owns key, and false when the table
// has no nodes.
func (t *Table) Owner(key string) (string, bool) {
	i := t.OwnerOfHash(HashKey(key))
	if i < 0 {
		return "", false
	}
	return t.ids[i], true
}

// OwnerOfHash returns the index in Nodes of the node that owns the key whose
// HashKey is h, or -1 when the table has no nodes.
func (t *Table) OwnerOfHash(h uint64) int {
	if t == nil || len(t.hashes) == 0 {
		return -1
	}
	if t.weight != nil {
		return t.ownerWeighted(h)
	}
	return ownerUnweighted(h, t.hashes)
}

// ownerUnweighted is the hot loop. Scanning in id order and replacing the
// best only on a strictly higher score gives ties to the smaller id; a
// starting best of (0, index 0) is what node 0 would set, as every score is
// at least 0.
func ownerUnweighted(h uint64, hashes []uint64) int {
	var best uint64
	idx := 0
	for i, nh := range hashes {
		if s := fmix64(h ^ nh); s > best {
			best, idx = s, i
		}
	}
	return idx
}

func (t *Table) ownerWeighted(h uint64) int {
	var best uint64
	idx := 0
	for i, nh := range t.hashes {
		if s := weighted(fmix64(h^nh), t.weight[i]); s > best {
			best, idx = s, i
		}
	}
	return idx
}

// score returns the comparable score of key hash h at node i.
func (t *Table) score(h uint64, i int) uint64 {
	s := fmix64(h ^ t.hashes[i])
	if t.weight != nil {
		return weighted(s, t.weight[i])
	}
	return s
}

// Rank returns the ids of the min(n, Len()) nodes with the highest scores
// for key, best first; Rank(key, 1) holds the owner and the next entries are
// the successors should it leave. It returns nil when n <= 0.
func (t *Table) Rank(key string, n int) []string {
	n = min(n, t.Len())
	if n <= 0 {
		return nil
	}
	type cand struct {
		score uint64
		i     int
	}
	h := HashKey(key)
	top := make([]cand, 0, n)
	for i := range t.hashes {
		s := t.score(h, i)
		if len(top) == n && s <= top[n-1].score {
			continue // a tie stays behind the smaller id already there
		}
		j := len(top)
		if j == n {
			j-- // drop the last
		} else {
			top = append(top, cand{})
		}
		for ; j > 0 && s > top[j-1].score; j-- {
			top[j] = top[j-1]
		}
		top[j] = cand{s, i}
	}
	ids := make([]string, n)
	for k, c := range top {
		ids[k] = t.ids[c.i]
	}
	return ids
}

// Owner returns the owner of key among the equally weighted nodes ids, as
// NewIDs(ids...).Owner(key) would, or "" when ids is empty. It hashes every
// id on each call and does not allocate; build a Table to look up many keys.
func Owner(key string, ids []string) string {
	h := HashKey(key)
	var best string
	var bestScore uint64
	for k, id := range ids {
		s := fmix64(h ^ hashNode(id))
		if k == 0 || s > bestScore || (s == bestScore && id < best) {
			best, bestScore = id, s
		}
	}
	return best
}

// WeightedScore returns the score of the key whose HashKey is h at node i
// as the float -weight/ln(u) of weighted rendezvous hashing (u is the
// pair's hash scaled into (0, 1)). It orders the nodes of a key as
// OwnerOfHash does, and it is proportional to the node's weight, so a
// caller may scale one node's scores by a factor to shift keys off it in a
// predictable order (the bounded-load planner does). It panics if i is out
// of range.
func (t *Table) WeightedScore(h uint64, i int) float64 {
	return math.Float64frombits(weighted(fmix64(h^t.hashes[i]), t.weightOf(i)))
}

// Weight returns the weight of node i (1 when all weights are equal).
func (t *Table) Weight(i int) float64 { return t.weightOf(i) }

// Top2 returns the indexes in Nodes of the two highest-scoring nodes for
// the key whose HashKey is h, best first (as Rank would order them); second
// is -1 with fewer than two nodes, and both are -1 with none.
func (t *Table) Top2(h uint64) (first, second int) {
	first, second = -1, -1
	var s1, s2 uint64
	for i := range t.hashes {
		s := t.score(h, i)
		switch {
		case first < 0 || s > s1:
			second, s2 = first, s1
			first, s1 = i, s
		case second < 0 || s > s2:
			second, s2 = i, s
		}
	}
	return first, second
}

func (t *Table) weightOf(i int) float64 {
	if t.weight == nil {
		return 1
	}
	return t.weight[i]
}
