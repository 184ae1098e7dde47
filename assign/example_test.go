package assign_test

import (
	"fmt"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/keyspace"
)

// A fleet of three workers and 300 sessions: every worker gets at most
// ceil(100 × 1.05) = 105 of them.
func Example() {
	sizes := make([]int, assign.Buckets)
	for i := range 300 {
		sizes[keyspace.BucketOf(fmt.Sprintf("api-%d", i))]++
	}
	plan := assign.NewFleetIDs("w1", "w2", "w3").Plan(sizes, 0.05)
	for _, w := range []string{"w1", "w2", "w3"} {
		fmt.Println(w, plan.Load(w) <= plan.Cap(w), plan.Cap(w))
	}
	// Output:
	// w1 true 105
	// w2 true 105
	// w3 true 105
}
