package assign

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

// logUniformLoads returns the loads (polls per day, as session.PollsPerDay
// counts them) and the session counts per bucket of n sessions with
// intervals log-uniform from 1 s to 1 h.
func logUniformLoads(seed uint64, n int) (loads, counts []int) {
	rng := rand.New(rand.NewPCG(seed, 5))
	loads, counts = make([]int, Buckets), make([]int, Buckets)
	for i := range n {
		sec := math.Exp(rng.Float64() * math.Log(3600))
		b := keyspace.BucketOf(fmt.Sprintf("s%d", i))
		loads[b] += int(math.Ceil(86400 / sec))
		counts[b]++
	}
	return loads, counts
}

// maxOverMean is max over mean of each member's load (in the units of
// loads) over its weight under plan p.
func maxOverMean(p *Plan, members []Member, loads []int) float64 {
	per := map[string]float64{}
	for b, l := range loads {
		per[p.Owner(b)] += float64(l)
	}
	var total, weight, worst float64
	for _, m := range members {
		w := m.Weight
		if w == 0 {
			w = 1
		}
		total += per[m.ID]
		weight += w
		worst = max(worst, per[m.ID]/w)
	}
	return worst / (total / weight)
}

// TestPlanByLoadBalancesPollRate: planned by loads, every worker's poll
// rate per unit of weight stays within the slack of the mean (the bound
// of Capacity), with equal and unequal weights; planned by counts (the
// same planner fed session counts), the same sessions are well off it
// when a worker has a few hundred sessions, which is what makes loads
// worth keeping.
func TestPlanByLoadBalancesPollRate(t *testing.T) {
	const slack = 0.05
	for _, tc := range []struct {
		sessions int
		weights  []float64
	}{
		{2000, []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{2000, []float64{2, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{20000, []float64{1, 1, 1, 1, 1}},
		{5000, []float64{3, 1, 0.5, 1}},
	} {
		for seed := range uint64(3) {
			name := fmt.Sprintf("%d sessions, weights %v, seed %d", tc.sessions, tc.weights, seed)
			loads, counts := logUniformLoads(seed, tc.sessions)
			members := make([]Member, len(tc.weights))
			for i, w := range tc.weights {
				members[i] = Member{ID: fmt.Sprintf("w%d", i), Weight: w}
			}
			f, err := NewFleet(members...)
			require.NoError(t, err)
			byLoad := maxOverMean(f.Plan(loads, slack), members, loads)
			require.LessOrEqual(t, byLoad, 1+slack, name)
			if tc.sessions == 2000 {
				byCount := maxOverMean(f.Plan(counts, slack), members, loads)
				require.Greater(t, byCount, 1.1, name+": count balance should be well off (else this data shows nothing)")
			}
		}
	}
}

// TestWeightedCaps: a worker of weight 2 gets a cap twice as large, and
// the caps add up to at least the total, so every bucket finds room.
func TestWeightedCaps(t *testing.T) {
	loads, _ := logUniformLoads(1, 3000)
	f, err := NewFleet(Member{ID: "a", Weight: 2}, Member{ID: "b"}, Member{ID: "c"})
	require.NoError(t, err)
	p := f.Plan(loads, 0.05)
	require.InDelta(t, 2*p.Cap("b"), p.Cap("a"), 2)
	require.Equal(t, p.Cap("b"), p.Cap("c"))
	require.GreaterOrEqual(t, p.Cap("a")+p.Cap("b")+p.Cap("c"), p.Total())
	for _, id := range []string{"a", "b", "c"} {
		require.LessOrEqual(t, p.Load(id), p.Cap(id), id)
	}
	require.Greater(t, p.Load("a"), p.Load("b"))
}

// TestLoadChangeMovesLittle: a session's interval changing (its bucket's
// load changing) moves nothing while no cap binds differently: the plan
// by loads keeps the stability the plan by counts has.
func TestLoadChangeMovesLittle(t *testing.T) {
	loads, _ := logUniformLoads(2, 5000)
	f := NewFleetIDs("a", "b", "c", "d")
	before := f.Plan(loads, 0.05)
	// The lightest non-empty bucket's load doubles: far below any slack.
	light := -1
	for b, l := range loads {
		if l > 0 && (light < 0 || l < loads[light]) {
			light = b
		}
	}
	loads[light] *= 2
	after := f.Plan(loads, 0.05)
	moved := 0
	for b := range Buckets {
		if before.Owner(b) != after.Owner(b) {
			moved++
		}
	}
	require.Zero(t, moved)
}
