package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

// TestSimTiny runs the sim scenario at its tiny size (no Redis) and checks
// what must hold of any placement: every lookup agrees with the plan, a
// leave moves at least the leaver's share, a join moves at least the
// newcomer's, and a Cluster needs more renewal calls than a single server
// (each call holds the leases of one slot).
func TestSimTiny(t *testing.T) {
	sz := tinySizes()
	rows, err := runSim(context.Background(), nil, sz)
	require.NoError(t, err)
	get := func(prefix string) Row {
		t.Helper()
		for _, r := range rows {
			if strings.HasPrefix(r.Figure, prefix) {
				return r
			}
		}
		t.Fatalf("no row %q", prefix)
		return Row{}
	}
	for _, w := range sz.simWorkers {
		pre := fmt.Sprintf("sim %d×%d: ", sz.simSessions, w)
		share := float64(sz.simSessions) / float64(w)
		require.Zero(t, get(pre+"sessions the planner's lookup").Ours.Max)
		require.GreaterOrEqual(t, get(pre+"sessions moved per leave").Ours.Median, 0.8*share, "a leave moves the leaver's share")
		require.GreaterOrEqual(t, get(pre+"sessions moved per join").Ours.Median, 0.8*float64(sz.simSessions)/float64(w+1))
		calls := get(pre + "renewal calls per worker")
		require.Greater(t, calls.Ours.Median, calls.Base.Median, "Cluster batches by slot")
		require.Positive(t, get(pre+"memory per worker: planner").Ours.Median)
		require.Positive(t, get(pre+"what if the slack were 0.25").Ours.Median)
	}
}

// TestMoved counts the sessions of the buckets whose owner changed, and
// those that moved between two workers other than the one excepted.
func TestMoved(t *testing.T) {
	p := &simPop{sizes: []int{10, 20, 30, 40}}
	a := simPlacement{0, 1, 2, 0}
	tests := []struct {
		name            string
		b               simPlacement
		except          int32
		all, collateral int
	}{
		{"same", simPlacement{0, 1, 2, 0}, -1, 0, 0},
		{"a leave of 0 with no collateral", simPlacement{1, 1, 2, 2}, 0, 50, 0},
		{"a leave of 0 that also moved bucket 1 from 1 to 2", simPlacement{1, 2, 2, 2}, 0, 70, 20},
		{"a join of 3 taking bucket 2", simPlacement{0, 1, 3, 0}, 3, 30, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			all, coll := moved(p, a, tt.b, tt.except)
			require.Equal(t, tt.all, all)
			require.Equal(t, tt.collateral, coll)
		})
	}
}

// TestSimModel checks the cost model's arithmetic: renewal operations
// and CPU, the slot ranges of masters, and the result streams' spread.
func TestSimModel(t *testing.T) {
	l := renewLoad(2, 1000, 10)
	require.InDelta(t, (2+2+1000)/10.0, l.ops, 1e-9, "an EVALSHA and an MGET per call, a PEXPIRE per lease")
	require.InDelta(t, (2*costCall+1000*costRenewLease)/10/1e6, l.cpu, 1e-12)

	for _, tt := range []struct{ slot, m, want int }{{0, 3, 0}, {5461, 3, 0}, {5462, 3, 1}, {16383, 3, 2}, {16383, 1, 0}} {
		require.Equal(t, tt.want, masterOf(tt.slot, tt.m), "slot %d of %d masters", tt.slot, tt.m)
	}

	md := simModel{workers: 10, sessions: 1_000_000}
	seen := map[int]bool{}
	for i := range keyspace.ResultStreams {
		seen[masterOf(streamSlot(i), keyspace.ResultStreams)] = true
	}
	require.Len(t, seen, keyspace.ResultStreams, "one stream per master at 16 masters")
	polls := float64(md.sessions)
	var sum float64
	for j := range 3 {
		sum += md.records(j, 3, time.Second).ops
	}
	require.InDelta(t, polls, sum, 1e-6, "every poll recorded once")
	require.InDelta(t, polls, md.records(0, 1, time.Second).ops, 1e-6, "a single server takes every record")
}
