package assign

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/pollworker/pollworker/hrw"
	"github.com/pollworker/pollworker/keyspace"
)

// Buckets is the number of index buckets placed: keyspace.SessionBuckets.
const Buckets = keyspace.SessionBuckets

// Member is a live worker as the planner sees it.
type Member struct {
	// ID is the worker id.
	ID string
	// Weight is the worker's relative capacity; 0 means 1.
	Weight float64
}

// BucketKey returns the string hashed to place bucket b.
func BucketKey(b int) string { return "bucket-" + strconv.Itoa(b) }

// SpaceKey returns the string hashed to place bucket b of the placement
// space named space: BucketKey(b) for the default space "", else
// "bucket-<b>|<space>" (a space is a canonical selector: the sessions
// restricted to the workers that match it are placed among those workers
// only, with rankings of their own).
func SpaceKey(space string, b int) string {
	if space == "" {
		return BucketKey(b)
	}
	return BucketKey(b) + "|" + space
}

// bucketHashes are the HashKey of every BucketKey, computed once.
var bucketHashes = sync.OnceValue(func() []uint64 {
	hs := make([]uint64, Buckets)
	for b := range hs {
		hs[b] = hrw.HashKey(BucketKey(b))
	}
	return hs
})

// Fleet is a set of live workers with every bucket's two best-ranked
// candidates among them. It is immutable; build one per membership.
type Fleet struct {
	space  string   // the placement space ("" by default)
	hashes []uint64 // bucket -> HashKey(SpaceKey(space, b))
	table  *hrw.Table
	first  []int32 // bucket -> table index of its rendezvous owner
	second []int32 // bucket -> the runner-up, -1 with one member
}

// NewFleet returns the Fleet of members (duplicate ids collapse to one,
// keeping the largest weight). It fails only for an invalid weight.
func NewFleet(members ...Member) (*Fleet, error) {
	return NewFleetIn("", members...)
}

// NewFleetIn is NewFleet for the buckets of the placement space named
// space (see SpaceKey): the same members rank every bucket of another
// space in an order of its own.
func NewFleetIn(space string, members ...Member) (*Fleet, error) {
	nodes := make([]hrw.Node, len(members))
	for i, m := range members {
		nodes[i] = hrw.Node{ID: m.ID, Weight: m.Weight}
	}
	t, err := hrw.New(nodes...)
	if err != nil {
		return nil, fmt.Errorf("assign: %w", err)
	}
	f := &Fleet{space: space, table: t, hashes: bucketHashes()}
	if space != "" {
		f.hashes = make([]uint64, Buckets)
		for b := range f.hashes {
			f.hashes[b] = hrw.HashKey(SpaceKey(space, b))
		}
	}
	if t.Len() == 0 {
		return f, nil
	}
	f.first = make([]int32, Buckets)
	f.second = make([]int32, Buckets)
	for b, h := range f.hashes {
		i, j := t.Top2(h)
		f.first[b], f.second[b] = int32(i), int32(j)
	}
	return f, nil
}

// NewFleetIDs is NewFleet of equally weighted workers.
func NewFleetIDs(ids ...string) *Fleet {
	ms := make([]Member, len(ids))
	for i, id := range ids {
		ms[i] = Member{ID: id}
	}
	f, _ := NewFleet(ms...) // weights 0 (= 1) are always valid
	return f
}

// Len is the number of workers.
func (f *Fleet) Len() int { return f.table.Len() }

// IDs returns the worker ids, sorted.
func (f *Fleet) IDs() []string { return f.table.Nodes() }

// Contains reports whether id is a worker of the fleet.
func (f *Fleet) Contains(id string) bool {
	_, ok := slices.BinarySearch(f.table.Nodes(), id)
	return ok
}

// Rank returns the workers ranked for session id by plain rendezvous
// hashing of its bucket, best first: the order a Plan starts from before
// any bound applies.
func (f *Fleet) Rank(id string) []string {
	return f.table.Rank(SpaceKey(f.space, keyspace.BucketOf(id)), f.table.Len())
}

// Space is the placement space the fleet ranks ("" by default).
func (f *Fleet) Space() string { return f.space }

// Plan is the placement of every bucket on a Fleet for given bucket sizes
// and slack. It is immutable.
type Plan struct {
	fleet *Fleet
	owner []int32 // bucket -> table index
	load  []int   // table index -> load (sum of its buckets' sizes)
	caps  []int   // table index -> cap; nil when unbounded
	total int
	bound []bool // table index -> it shed buckets to keep within its cap
}

// Plan places the buckets. sizes[b] is the load of bucket b (the workers
// give polls per day, or the number of sessions; see the package doc)
// (nil or shorter than Buckets: missing buckets count 0). A negative slack
// means no bound: every bucket stays with its rendezvous owner.
func (f *Fleet) Plan(sizes []int, slack float64) *Plan {
	p := &Plan{fleet: f}
	n := f.table.Len()
	if n == 0 {
		return p
	}
	p.owner = slices.Clone(f.first)
	p.load = make([]int, n)
	size := func(b int) int {
		if b < len(sizes) {
			return max(sizes[b], 0)
		}
		return 0
	}
	for b, o := range p.owner {
		p.load[o] += size(b)
		p.total += size(b)
	}
	if slack < 0 || n == 1 {
		return p
	}
	p.caps = capacities(f.table, p.total, slack)
	p.bound = make([]bool, n)
	b := balancer{p: p, size: size}
	b.run()
	return p
}

// balancer moves buckets off overloaded workers.
type balancer struct {
	p    *Plan
	size func(b int) int
}

// run sheds the load of each overloaded worker, in id order, until it is
// within its cap. A worker sheds its buckets in the order of how close their
// runner-up's score comes to its own (the ratio of the two plain rendezvous
// scores, fixed for a membership), so that a worker over its cap by a few
// sessions always sheds the same few buckets, whatever else changed; each
// goes to the best-scoring worker that has room for it, or stays where it
// is if none has.
func (bl *balancer) run() {
	p := bl.p
	for w := range p.load {
		if p.load[w] > p.caps[w] {
			bl.shed(w)
		}
	}
}

type candidate struct {
	bucket int
	ratio  float64 // best other worker's score over this worker's score
}

// shed moves buckets off w until it is within its cap.
func (bl *balancer) shed(w int) {
	p := bl.p
	t := p.fleet.table
	hs := p.fleet.hashes
	n := t.Len()
	var cands []candidate
	for b, o := range p.owner {
		if int(o) != w || bl.size(b) == 0 {
			continue
		}
		own := t.WeightedScore(hs[b], w)
		alt := 0.0
		for j := range n {
			if j != w {
				alt = max(alt, t.WeightedScore(hs[b], j))
			}
		}
		cands = append(cands, candidate{bucket: b, ratio: alt / own})
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(b.ratio, a.ratio), cmp.Compare(a.bucket, b.bucket))
	})
	for _, c := range cands {
		if p.load[w] <= p.caps[w] {
			return
		}
		s := bl.size(c.bucket)
		to, best := -1, 0.0
		for j := range n {
			if j == w || p.load[j]+s > p.caps[j] {
				continue
			}
			if sc := t.WeightedScore(hs[c.bucket], j); to < 0 || sc > best {
				to, best = j, sc
			}
		}
		if to < 0 {
			continue // fits nowhere else: it stays
		}
		p.owner[c.bucket] = int32(to)
		p.load[w] -= s
		p.load[to] += s
		p.bound[w] = true
	}
}

// Capacity returns the cap of a worker with the given share of the total
// weight, for total sessions: ceil(Q × share × (1+slack)), where Q is
// total rounded down to a multiple of a power of two near total × slack/5
// (so Q ≥ total × (1 − slack/5), and Q = total below 100 sessions at slack
// 0.05). The grid keeps
// the caps constant while sessions are added one by one; it never makes a
// cap larger than ceil(total × share × (1+slack)).
func Capacity(total int, share, slack float64) int {
	return max(int(math.Ceil(float64(quantize(total, slack))*share*(1+slack))), 1)
}

// quantize rounds total down to a multiple of the largest power of two
// not above total × slack/5 (1 below 100 sessions at slack 0.05), so the
// result is at least total × (1 − slack/5).
func quantize(total int, slack float64) int {
	step := 1
	for float64(step*2) <= float64(total)*slack/5 {
		step *= 2
	}
	return total - total%step
}

// capacities returns each worker's cap; they add up to at least total, so
// every bucket can find room.
func capacities(t *hrw.Table, total int, slack float64) []int {
	n := t.Len()
	sum := 0.0
	for i := range n {
		sum += t.Weight(i)
	}
	caps := make([]int, n)
	capSum := 0
	for i := range n {
		caps[i] = Capacity(total, t.Weight(i)/sum, slack)
		capSum += caps[i]
	}
	if capSum < total { // rounding: fall back to the exact total
		for i := range n {
			caps[i] = max(int(math.Ceil(float64(total)*t.Weight(i)/sum*(1+slack))), 1)
		}
	}
	return caps
}

// Fleet returns the fleet the plan places buckets on.
func (p *Plan) Fleet() *Fleet { return p.fleet }

// Owner returns the worker that owns bucket b, "" with no worker.
func (p *Plan) Owner(b int) string {
	if p.owner == nil {
		return ""
	}
	return p.fleet.table.ID(int(p.owner[b]))
}

// OwnerOf returns the worker that owns session id, "" with no worker.
func (p *Plan) OwnerOf(id string) string { return p.Owner(keyspace.BucketOf(id)) }

// Watcher returns the worker that watches bucket b for orphans: the best
// ranked worker after its owner; "" with fewer than two workers.
func (p *Plan) Watcher(b int) string {
	f := p.fleet
	if f.table.Len() < 2 {
		return ""
	}
	w := f.first[b]
	if w == p.owner[b] {
		w = f.second[b]
	}
	return f.table.ID(int(w))
}

// Preferred reports whether bucket b's owner is its rendezvous owner (the
// bound did not move it).
func (p *Plan) Preferred(b int) bool {
	return p.owner != nil && p.owner[b] == p.fleet.first[b]
}

// Load returns the load (sum of sizes) placed on worker id.
func (p *Plan) Load(id string) int {
	i, ok := slices.BinarySearch(p.fleet.table.Nodes(), id)
	if !ok || p.load == nil {
		return 0
	}
	return p.load[i]
}

// Cap returns worker id's cap, -1 when loads are not bounded.
func (p *Plan) Cap(id string) int {
	i, ok := slices.BinarySearch(p.fleet.table.Nodes(), id)
	if !ok || p.caps == nil {
		return -1
	}
	return p.caps[i]
}

// Bound reports whether worker id's rendezvous weight was lowered to keep
// it within its cap (some of its buckets went to their runner-up).
func (p *Plan) Bound(id string) bool {
	i, ok := slices.BinarySearch(p.fleet.table.Nodes(), id)
	return ok && p.bound != nil && p.bound[i]
}

// Total is the load placed: the sum of the sizes.
func (p *Plan) Total() int { return p.total }

// Owners returns the owner of each session of ids (out[i] for ids[i]) on a
// fleet of workers whose sessions are exactly ids: what a fleet of
// coordinators with these members and this slack computes.
func Owners(workers, ids []string, slack float64) []string {
	sizes := make([]int, Buckets)
	for _, id := range ids {
		sizes[keyspace.BucketOf(id)]++
	}
	p := NewFleetIDs(workers...).Plan(sizes, slack)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = p.OwnerOf(id)
	}
	return out
}
