// Package greedyplan is the placement policy pollworker had before package
// assign: rendezvous hashing with loads bounded greedily in hash order (a
// key whose owner is full goes to its best-ranked node with room). It is
// kept only as the reference the planner is measured against (this
// package's test, pollbench's adds scenario); nothing places sessions
// with it.
package greedyplan

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/pollworker/pollworker/hrw"
)

// Owners returns the owner of each key (keys[i], standing for sizes[i]
// items) among the equally weighted nodes, with each node's load bounded
// by ceil(total / nodes × (1+slack)). A key that fits nowhere stays with
// its rendezvous owner.
func Owners(nodes, keys []string, sizes []int, slack float64) []string {
	t := hrw.NewIDs(nodes...)
	hashes := make([]uint64, len(keys))
	order := make([]int, 0, len(keys))
	total := 0
	for i, k := range keys {
		hashes[i] = hrw.HashKey(k)
		total += sizes[i]
		if sizes[i] > 0 {
			order = append(order, i)
		}
	}
	owner := t.Assign(keys, nil)
	limit := int(math.Ceil(float64(total) / float64(t.Len()) * (1 + slack)))
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(hashes[a], hashes[b]), strings.Compare(keys[a], keys[b]))
	})
	load := make([]int, t.Len())
	for _, i := range order {
		w := sizes[i]
		if load[owner[i]]+w <= limit {
			load[owner[i]] += w
			continue
		}
		best, bestScore := -1, 0.0
		for j := range t.Len() {
			if s := t.WeightedScore(hashes[i], j); load[j]+w <= limit && (best < 0 || s > bestScore) {
				best, bestScore = j, s
			}
		}
		if best < 0 {
			best = owner[i]
		}
		owner[i] = best
		load[best] += w
	}
	out := make([]string, len(keys))
	for i := range out {
		out[i] = t.ID(owner[i])
	}
	return out
}
