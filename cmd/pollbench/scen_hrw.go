package main

import (
	"context"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	rendezvous "github.com/dgryski/go-rendezvous"

	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/hrw"
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
		bounded := balance(table.AssignBounded(ids, 0.1, nil), len(nodes))
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
			Row{Figure: fmt.Sprintf("balance max/mean, %s ids, %d over %d (bounded, slack 0.1: the poller's default)", kind, len(ids), len(nodes)),
				Target: "≤ 1.05", Ours: bench.Summarize([]float64{bounded}), Met: met(bounded <= 1.05)})
	}
	// Movement on a join (N-1 → N) and a leave (N → N-1).
	ids := bench.SequentialIDs(sz.balanceSessions)
	before, after := hrw.NewIDs(nodes[:len(nodes)-1]...), hrw.NewIDs(nodes...)
	ideal := float64(len(ids)) / float64(len(nodes))
	for _, slack := range []float64{-1, 0.1} {
		name := "plain"
		if slack >= 0 {
			name = "bounded 0.1"
		}
		a := owners(before, ids, slack)
		b := owners(after, ids, slack)
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

func owners(t *hrw.Table, ids []string, slack float64) []string {
	idx := t.AssignBounded(ids, slack, nil)
	out := make([]string, len(ids))
	for i, j := range idx {
		out[i] = t.ID(j)
	}
	return out
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
