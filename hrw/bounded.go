package hrw

import (
	"math"
	"slices"
	"strings"
)

// AssignBounded is Assign with bounded loads (consistent hashing with
// bounded loads, Mirrokni, Thorup and Zadimoghaddam): no node receives more
// than ceil(len(keys) × share × (1+slack)) keys, where share is the node's
// weight over the total weight. Each key keeps its rendezvous owner unless
// that node is full; keys are placed in ascending order of (HashKey, key),
// and a key whose owner is full goes to its highest-ranked node with room.
// The result depends only on the node set and the key set, so every worker
// that sees the same sessions computes the same assignment.
//
// With many keys per node the cap rarely binds and the result equals
// Assign's; with few keys per node it removes the statistical imbalance
// (for 300 keys on 3 nodes plain rendezvous hashing is often 20% off even).
// A negative slack means no bound (plain Assign).
func (t *Table) AssignBounded(keys []string, slack float64, out []int) []int {
	return t.AssignWeighted(keys, nil, slack, out)
}

// AssignWeighted is AssignBounded for keys that stand for sizes[i] items
// each (buckets of sessions, say; nil sizes means 1 each): the caps count
// items, ceil(total items × share × (1+slack)) per node. A key of size 0
// always stays with its rendezvous owner. A key that fits nowhere (larger
// than every node's remaining room) goes to the node with the most room.
func (t *Table) AssignWeighted(keys []string, sizes []int, slack float64, out []int) []int {
	out = t.Assign(keys, out)
	n := t.Len()
	if n == 0 || slack < 0 || len(keys) == 0 {
		return out
	}
	size := func(i int) int {
		if sizes == nil {
			return 1
		}
		return sizes[i]
	}
	total := 0
	for i := range keys {
		total += size(i)
	}
	caps := t.capacities(total, slack)
	load := make([]int, n)
	over := false
	for i, o := range out {
		load[o] += size(i)
		if load[o] > caps[o] {
			over = true
		}
	}
	if !over {
		return out
	}
	hashes := make([]uint64, len(keys))
	order := make([]int, 0, len(keys))
	for i, k := range keys {
		hashes[i] = HashKey(k)
		if size(i) > 0 {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case hashes[a] < hashes[b]:
			return -1
		case hashes[a] > hashes[b]:
			return 1
		}
		return strings.Compare(keys[a], keys[b])
	})
	clear(load)
	for _, i := range order {
		w := size(i)
		if o := out[i]; load[o]+w <= caps[o] {
			load[o] += w
			continue
		}
		best, bestScore := -1, uint64(0)
		for j := range n {
			if load[j]+w > caps[j] {
				continue
			}
			if s := t.score(hashes[i], j); best < 0 || s > bestScore {
				best, bestScore = j, s
			}
		}
		if best < 0 { // fits nowhere: the most room
			for j := range n {
				if best < 0 || caps[j]-load[j] > caps[best]-load[best] {
					best = j
				}
			}
		}
		out[i] = best
		load[best] += w
	}
	return out
}

// capacities returns each node's cap for total keys; they add up to at
// least total, so every key finds room.
func (t *Table) capacities(total int, slack float64) []int {
	n := t.Len()
	caps := make([]int, n)
	sum := 0.0
	for i := range n {
		sum += t.weightOf(i)
	}
	for i := range n {
		caps[i] = int(math.Ceil(float64(total) * t.weightOf(i) / sum * (1 + slack)))
		caps[i] = max(caps[i], 1)
	}
	return caps
}

func (t *Table) weightOf(i int) float64 {
	if t.weight == nil {
		return 1
	}
	return t.weight[i]
}
