package main

import (
	"context"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	rendezvous "github.com/dgryski/go-rendezvous"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/hrw"
	"github.com/pollworker/pollworker/poller"
)

// runHRW times bulk assignment against go-rendezvous (with xxhash, as
// go-redis's Ring uses it), and measures balance and movement.
func runHRW(ctx context.Context, _ *env, sz sizes) ([]Row, error) {
	nodes := workerIDs("node", sz.hrwNodes)
	var rows []Row
	for _, kind := range []string{"sequential", "uuid"} {
		ids := bench.SequentialIDs(sz.hrwSessions)
		if kind == "uuid" {
			ids = bench.UUIDs(sz.hrwSessions)
		}
		pairs := float64(len(ids) * len(nodes))
		table := hrw.NewIDs(nodes...)
		rv := rendezvous.New(nodes, xxhash.Sum64String)
		out := make([]int, len(ids))
		var ours, theirs []float64
		for r := 0; r < sz.runs; r++ {
			if ctx.Err() != nil {
				return rows, ctx.Err()
			}
			t0 := time.Now()
			out = table.Assign(ids, out)
			ours = append(ours, float64(time.Since(t0).Nanoseconds())/pairs)
			t0 = time.Now()
			var sink int
			for _, id := range ids {
				sink += len(rv.Lookup(id))
			}
			theirs = append(theirs, float64(time.Since(t0).Nanoseconds())/pairs)
			_ = sink
		}
		o, t := bench.Summarize(ours), bench.Summarize(theirs)
		rows = append(rows, Row{
			Figure: fmt.Sprintf("HRW bulk assign, %s ids, %d×%d", kind, len(ids), len(nodes)),
			Target: "≤ 3 ns/pair, ≤ go-rendezvous", Unit: "ns/pair", Ours: o, Base: &t, BaseName: "go-rendezvous",
			Ratio: t.Median / o.Median, Met: met(o.Median <= 3 && o.Median <= t.Median),
		})
	}
	// Balance at balanceSessions × balanceOn.
	nodes = workerIDs("node", sz.balanceOn)
	for _, kind := range []string{"sequential", "uuid"} {
		ids := bench.SequentialIDs(sz.balanceSessions)
		if kind == "uuid" {
			ids = bench.UUIDs(sz.balanceSessions)
		}
		table := hrw.NewIDs(nodes...)
		plain := balance(table.Assign(ids, nil), len(nodes))
		bounded := balanceOf(assign.Owners(nodes, ids, poller.DefaultBalanceSlack), nodes)
		rv := rendezvous.New(nodes, xxhash.Sum64String)
		idx := make(map[string]int, len(nodes))
		for i, n := range nodes {
			idx[n] = i
		}
		theirs := make([]int, len(ids))
		for i, id := range ids {
			theirs[i] = idx[rv.Lookup(id)]
		}
		gr := bench.Summarize([]float64{balance(theirs, len(nodes))})
		rows = append(rows,
			Row{Figure: fmt.Sprintf("balance max/mean, %s ids, %d over %d (plain HRW)", kind, len(ids), len(nodes)),
				Target: "≤ 1.05", Ours: bench.Summarize([]float64{plain}), Base: &gr, BaseName: "go-rendezvous",
				Met: met(plain <= 1.05)},
			Row{Figure: fmt.Sprintf("balance max/mean, %s ids, %d over %d (the poller's: 16384 buckets, bounded loads slack %g)", kind, len(ids), len(nodes), poller.DefaultBalanceSlack),
				Target: "≤ 1.05", Ours: bench.Summarize([]float64{bounded}), Met: met(bounded <= 1.05)})
	}
	// Movement on a join (N-1 → N) and a leave (N → N-1).
	ids := bench.SequentialIDs(sz.balanceSessions)
	before, after := hrw.NewIDs(nodes[:len(nodes)-1]...), hrw.NewIDs(nodes...)
	ideal := float64(len(ids)) / float64(len(nodes))
	for _, slack := range []float64{-1, poller.DefaultBalanceSlack} {
		name := "plain HRW per session"
		a, b := owners(before, ids), owners(after, ids)
		if slack >= 0 {
			name = fmt.Sprintf("the poller's: buckets, bounded %g", slack)
			a = assign.Owners(nodes[:len(nodes)-1], ids, slack)
			b = assign.Owners(nodes, ids, slack)
		}
		moved, survivorsMoved := 0, 0
		leaver := nodes[len(nodes)-1]
		for i := range ids {
			if a[i] != b[i] {
				moved++
				if a[i] != leaver && b[i] != leaver {
					survivorsMoved++ // leave (b → a) moved a session between survivors
				}
			}
		}
		rows = append(rows,
			Row{Figure: fmt.Sprintf("sessions moved on a join / ideal (%s)", name), Target: "≤ 1.05",
				Ours: bench.Summarize([]float64{float64(moved) / ideal}), Met: met(float64(moved)/ideal <= 1.05)},
			Row{Figure: fmt.Sprintf("sessions moved among survivors on a leave (%s)", name), Target: "0", Unit: "sessions",
				Ours: bench.Summarize([]float64{float64(survivorsMoved)}), Met: met(survivorsMoved == 0)})
	}
	return rows, nil
}

// owners is plain rendezvous hashing per session (no buckets, no bound).
func owners(t *hrw.Table, ids []string) []string {
	idx := t.Assign(ids, nil)
	out := make([]string, len(ids))
	for i, j := range idx {
		out[i] = t.ID(j)
	}
	return out
}

// balanceOf is max/mean of the sessions per node for owner names.
func balanceOf(owner []string, nodes []string) float64 {
	counts := map[string]int{}
	for _, o := range owner {
		counts[o]++
	}
	mx := 0
	for _, c := range counts {
		mx = max(mx, c)
	}
	return float64(mx) / (float64(len(owner)) / float64(len(nodes)))
}

func balance(idx []int, n int) float64 {
	counts := make([]int, n)
	for _, i := range idx {
		counts[i]++
	}
	mx := 0
	for _, c := range counts {
		mx = max(mx, c)
	}
	return float64(mx) / (float64(len(idx)) / float64(n))
}
