package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// The "sim" scenario: the fleet at internet scale, without a network. It
// drives the real planner (fleet.Planner.Place, with package assign's
// policy over package hrw) for simSessions sessions over each fleet size
// of simWorkers, measures what the planner does and holds, and feeds what
// it places into a Redis cost model calibrated from the measured costs of
// BENCHMARKS.md (scen_sim_model.go). Nothing talks to Redis: the env is
// not used.
//
// A session is two uint16s here (its index bucket and its lease key's hash
// slot), so that 10M sessions take 40 MB; the workers' ids of their own
// sessions, their definitions and their bucket ids are built for a sample
// of workers only (simSample), whose sizes the notes show.

// simPop is the simulated sessions: ids "sess-<i>", i < n.
type simPop struct {
	n      int
	bucket []uint16 // session -> index bucket (keyspace.BucketOf)
	slot   []uint16 // session -> hash slot of its lease key (keyspace.Slot)
	sizes  []int    // bucket -> sessions
	start  []int32  // bucket b's sessions are byBucket[start[b]:start[b+1]]
	order  []int32  // session indexes grouped by bucket
}

func simID(i int) string { return "sess-" + strconv.Itoa(i) }

// newSimPop hashes n session ids into their buckets and lease slots, on
// two goroutines.
func newSimPop(n int) *simPop {
	p := &simPop{n: n, bucket: make([]uint16, n), slot: make([]uint16, n)}
	keys := keyspace.Space{}
	var wg sync.WaitGroup
	const parts = 2
	for part := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := part * n / parts; i < (part+1)*n/parts; i++ {
				id := simID(i)
				p.bucket[i] = uint16(keyspace.BucketOf(id))
				p.slot[i] = keyspace.Slot(keys.Lease(id))
			}
		}()
	}
	wg.Wait()
	p.sizes = make([]int, assign.Buckets)
	for _, b := range p.bucket {
		p.sizes[b]++
	}
	p.start = make([]int32, assign.Buckets+1)
	for b, s := range p.sizes {
		p.start[b+1] = p.start[b] + int32(s)
	}
	p.order = make([]int32, n)
	next := slices.Clone(p.start[:assign.Buckets])
	for i, b := range p.bucket {
		p.order[next[b]] = int32(i)
		next[b]++
	}
	return p
}

// sessionsOf returns the session indexes of buckets bs.
func (p *simPop) sessionsOf(bs []int) []int32 {
	var out []int32
	for _, b := range bs {
		out = append(out, p.order[p.start[b]:p.start[b+1]]...)
	}
	return out
}

// simPlacement is a placement reduced to the owner of each bucket, as a
// worker index (-1 for a worker not in ids).
type simPlacement []int32

func ownersOf(pl fleet.Placement, index map[string]int32) simPlacement {
	out := make(simPlacement, assign.Buckets)
	for b := range out {
		i, ok := index[pl.Default.Owner(b)]
		if !ok {
			i = -1
		}
		out[b] = i
	}
	return out
}

// moved is the number of sessions whose bucket changed owner from a to b,
// and among them those that moved between two workers of neither except
// (collateral moves of the load bound; -1: none excepted).
func moved(p *simPop, a, b simPlacement, except int32) (all, collateral int) {
	for bk := range a {
		if a[bk] != b[bk] {
			all += p.sizes[bk]
			if a[bk] != except && b[bk] != except {
				collateral += p.sizes[bk]
			}
		}
	}
	return all, collateral
}

// simFleet is one simulated fleet size on a population.
type simFleet struct {
	pop   *simPop
	ids   []string
	index map[string]int32
	slack float64
	base  simPlacement // the placement of ids (bounded loads, the workers' slack)
	free  simPlacement // the same without the bound (plain rendezvous of the buckets)
	pl    fleet.Placement
}

// unbounded is the slack that turns the load bound off (assign.Fleet.Plan).
const unbounded = -1

func newSimFleet(pop *simPop, workers int) (*simFleet, error) {
	f := &simFleet{pop: pop, ids: workerIDs("worker", workers), index: make(map[string]int32, workers+1), slack: poller.DefaultBalanceSlack}
	for i, id := range f.ids {
		f.index[id] = int32(i)
	}
	pl, err := fleet.NewPlanner(f.slack).Place(fleet.Equal(f.ids...), pop.sizes, nil, nil)
	if err != nil {
		return nil, err
	}
	f.pl, f.base = pl, ownersOf(pl, f.index)
	f.free, err = f.place(f.ids, unbounded)
	return f, err
}

// place plans ids with a planner of its own (a membership change: every
// worker builds the fleet anew) and the given slack.
func (f *simFleet) place(ids []string, slack float64) (simPlacement, error) {
	pl, err := fleet.NewPlanner(slack).Place(fleet.Equal(ids...), f.pop.sizes, nil, nil)
	if err != nil {
		return nil, err
	}
	return ownersOf(pl, f.index), nil
}

// balance is the most loaded worker's sessions over the mean.
func (f *simFleet) balance(pl simPlacement) float64 {
	load := make([]int, len(f.ids))
	for b, w := range pl {
		load[w] += f.pop.sizes[b]
	}
	return float64(slices.Max(load)) * float64(len(f.ids)) / float64(f.pop.n)
}

// planTimes times Place on a membership change (a new planner: the fleet
// is built, every bucket ranked, then planned) and on a change of sizes
// alone (the planner keeps the fleet: Plan only), runs times each: the
// CPU time of the planning thread, and the wall time.
func (f *simFleet) planTimes(ctx context.Context, runs int) (member, sizes, wall []float64, err error) {
	ms := fleet.Equal(f.ids...)
	other := slices.Clone(f.pop.sizes)
	for r := 0; r < runs && ctx.Err() == nil; r++ {
		p := fleet.NewPlanner(f.slack)
		cpu, w := threadCPU(func() { _, err = p.Place(ms, f.pop.sizes, nil, nil) })
		if err != nil {
			return nil, nil, nil, err
		}
		member, wall = append(member, ms1(cpu)), append(wall, ms1(w))
		other[r%len(other)]++ // a session added: the sizes changed
		cpu, _ = threadCPU(func() { _, err = p.Place(ms, other, nil, nil) })
		if err != nil {
			return nil, nil, nil, err
		}
		sizes = append(sizes, ms1(cpu))
	}
	return member, sizes, wall, ctx.Err()
}

func ms1(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// moves are the sessions that membership changes moved: all of them,
// those moved between workers that stayed (the load bound's collateral),
// and all of them without the bound (plain rendezvous of the buckets).
type moves struct{ all, collateral, free []float64 }

func (m *moves) add(all, collateral, free int) {
	m.all = append(m.all, float64(all))
	m.collateral = append(m.collateral, float64(collateral))
	m.free = append(m.free, float64(free))
}

// joins plans n newcomers, one at a time, each against the base fleet.
func (f *simFleet) joins(ctx context.Context, n int) (m moves, err error) {
	for j := 0; j < n && ctx.Err() == nil; j++ {
		id := "joiner-" + strconv.Itoa(j)
		joiner := int32(len(f.ids))
		f.index[id] = joiner
		ids := append(slices.Clone(f.ids), id)
		after, err := f.place(ids, f.slack)
		if err != nil {
			return m, err
		}
		free, err := f.place(ids, unbounded)
		delete(f.index, id)
		if err != nil {
			return m, err
		}
		a, c := moved(f.pop, f.base, after, joiner)
		fr, _ := moved(f.pop, f.free, free, joiner)
		m.add(a, c, fr)
	}
	return m, ctx.Err()
}

// leaves plans the leave of each worker of which (one at a time, each from
// the base fleet). A rolling restart is a leave and a rejoin of each
// worker in turn; the rejoin restores the base placement (it depends only
// on the members and the sizes), so it moves the leave's sessions back.
func (f *simFleet) leaves(ctx context.Context, which []int) (m moves, err error) {
	for _, w := range which {
		if ctx.Err() != nil {
			break
		}
		rest := slices.Delete(slices.Clone(f.ids), w, w+1)
		after, err := f.place(rest, f.slack)
		if err != nil {
			return m, err
		}
		free, err := f.place(rest, unbounded)
		if err != nil {
			return m, err
		}
		a, c := moved(f.pop, f.base, after, int32(w))
		fr, _ := moved(f.pop, f.free, free, int32(w))
		m.add(a, c, fr)
	}
	return m, ctx.Err()
}

// simWorker is what one sampled worker holds and does.
type simWorker struct {
	sessions     int     // sessions placed on it
	ownBuckets   int     // buckets it owns (definitions read)
	watchBuckets int     // buckets it watches for orphans (ids only)
	bucketsMs    float64 // Placement.Buckets(me)
	lookupMs     float64 // the placement's owner of each of its sessions
	wrong        int     // of those, owned by another worker (must be 0)
	idBytes      float64 // heap of its buckets' id lists ([]string per bucket, as the poller keeps them)
	defBytes     float64 // heap of its sessions' definitions (session.Session)
}

// worker measures worker w of the base placement: the per-worker part of
// a round (its buckets, and the owner lookup the round's decision makes
// for each session it reads) and the heap of its bucket ids and
// definitions.
func (f *simFleet) worker(w int) simWorker {
	me := f.ids[w]
	var sw simWorker
	t0 := time.Now()
	want := f.pl.Buckets(me)
	sw.bucketsMs = ms1(time.Since(t0))
	var own, watch []int
	for b, assigned := range want {
		if assigned {
			own = append(own, b)
		} else {
			watch = append(watch, b)
		}
	}
	slices.Sort(own)
	sw.ownBuckets, sw.watchBuckets = len(own), len(watch)
	mine := f.pop.sessionsOf(own)
	sw.sessions = len(mine)

	runtime.GC()
	before := heapAlloc()
	ids := make([]string, len(mine))
	for i, s := range mine {
		ids[i] = simID(int(s))
	}
	watched := f.pop.sessionsOf(watch)
	wids := make([]string, len(watched))
	for i, s := range watched {
		wids[i] = simID(int(s))
	}
	runtime.GC()
	sw.idBytes = heapAlloc() - before

	t0 = time.Now()
	for _, id := range ids {
		if f.pl.OwnerOf(id, fleet.Selector{}) != me {
			sw.wrong++
		}
	}
	sw.lookupMs = ms1(time.Since(t0))

	runtime.GC()
	before = heapAlloc()
	defs := make([]*session.Session, len(ids))
	for i, id := range ids {
		defs[i] = &session.Session{ID: id, URL: "https://api.example.com/v1/items/" + id + "/events", Interval: session.Duration(time.Minute)}
	}
	runtime.GC()
	sw.defBytes = heapAlloc() - before
	runtime.KeepAlive(ids)
	runtime.KeepAlive(wids)
	runtime.KeepAlive(defs)
	return sw
}

// plannerBytes is the heap a worker's planner holds after a plan: the
// default space's fleet (the ranked buckets) and the placement.
func (f *simFleet) plannerBytes() (float64, error) {
	runtime.GC()
	before := heapAlloc()
	p := fleet.NewPlanner(f.slack)
	pl, err := p.Place(fleet.Equal(f.ids...), f.pop.sizes, nil, nil)
	runtime.GC()
	after := heapAlloc()
	runtime.KeepAlive(p)
	runtime.KeepAlive(pl)
	return after - before, err
}

func heapAlloc() float64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}

// renewCalls counts the renewal script calls every worker sends per cycle
// under Redis Cluster, where each call holds the leases of one hash slot
// (at most the batch size), by slot: calls[s] is the number of calls for
// slot s over the fleet, leases[s] the leases of slot s. A single server
// batches a worker's leases regardless of slot: ceil(held/batch) calls.
func (f *simFleet) renewCalls(batch int) (calls, leases []int, single int) {
	calls, leases = make([]int, keyspaceSlots), make([]int, keyspaceSlots)
	byWorker := make([][]int, len(f.ids))
	for b, w := range f.base {
		byWorker[w] = append(byWorker[w], b)
	}
	count := make([]int, keyspaceSlots)
	for _, bs := range byWorker {
		held := f.pop.sessionsOf(bs)
		for _, s := range held {
			count[f.pop.slot[s]]++
		}
		for _, s := range held {
			if n := count[f.pop.slot[s]]; n > 0 {
				sl := f.pop.slot[s]
				calls[sl] += (n + batch - 1) / batch
				leases[sl] += n
				count[sl] = 0
			}
		}
		single += (len(held) + batch - 1) / batch
	}
	return calls, leases, single
}

const keyspaceSlots = 16384 // Redis Cluster hash slots

// bucketTaggedCalls is renewCalls for a key layout that is not
// pollworker's: lease keys hash-tagged by index bucket instead of by
// session, so that a bucket's leases share one slot (and one owner) and a
// Cluster call carries up to batch of them. A what-if for the model.
func (f *simFleet) bucketTaggedCalls(batch int) (calls, leases []int) {
	calls, leases = make([]int, keyspaceSlots), make([]int, keyspaceSlots)
	for b, n := range f.pop.sizes {
		sl := keyspace.Slot("{" + assign.BucketKey(b) + "}")
		calls[sl] += (n + batch - 1) / batch
		leases[sl] += n
	}
	return calls, leases
}

// slackWhatIf plans the base fleet and one join at another slack: the
// balance (most loaded / mean) and the join's moves over the ideal share.
func (f *simFleet) slackWhatIf(slack float64) (balance, joinRatio float64, err error) {
	base, err := f.place(f.ids, slack)
	if err != nil {
		return 0, 0, err
	}
	id := "joiner-slack"
	joiner := int32(len(f.ids))
	f.index[id] = joiner
	after, err := f.place(append(slices.Clone(f.ids), id), slack)
	delete(f.index, id)
	if err != nil {
		return 0, 0, err
	}
	all, _ := moved(f.pop, base, after, joiner)
	return f.balance(base), float64(all) * float64(len(f.ids)+1) / float64(f.pop.n), nil
}

// sample returns k worker indexes spread evenly over n (all when k >= n).
func sample(n, k int) []int {
	if k >= n {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, k)
	for i := range out {
		out[i] = i * n / k
	}
	return out
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// runSim is the "sim" scenario.
func runSim(ctx context.Context, _ *env, sz sizes) ([]Row, error) {
	t0 := time.Now()
	pop := newSimPop(sz.simSessions)
	popTime := time.Since(t0)
	var rows []Row
	for _, w := range sz.simWorkers {
		r, err := simFleetRows(ctx, pop, w, sz)
		rows = append(rows, r...)
		if err != nil {
			return rows, err
		}
	}
	rows = append(rows, Row{Figure: fmt.Sprintf("sim: whole scenario, %d sessions (hashing them: %s)", pop.n, popTime.Round(time.Millisecond)),
		Target: "< 10 min (issue 27)", Unit: "s", Ours: one(time.Since(t0).Seconds()), Met: met(time.Since(t0) < 10*time.Minute),
		Note: simLoadNote()})
	return rows, nil
}

// simFleetRows simulates one fleet size.
func simFleetRows(ctx context.Context, pop *simPop, workers int, sz sizes) ([]Row, error) {
	f, err := newSimFleet(pop, workers)
	if err != nil {
		return nil, err
	}
	pre := fmt.Sprintf("sim %d×%d: ", pop.n, workers)
	member, sizesOnly, wall, err := f.planTimes(ctx, sz.runs)
	if err != nil {
		return nil, err
	}
	rows := []Row{
		{Figure: pre + "plan on a membership change (Planner.Place: fleet built, buckets ranked, planned), CPU per worker and round", Unit: "ms", Ours: bench.Summarize(member),
			Note: fmt.Sprintf("CPU time of the planning thread; wall median %.1f ms on the shared machine. Every worker plans the whole fleet itself, once per membership change; a round with no change plans nothing", bench.Summarize(wall).Median)},
		{Figure: pre + "plan on a change of sizes only (Planner.Place, fleet kept), CPU", Unit: "ms", Ours: bench.Summarize(sizesOnly)},
		{Figure: pre + "balance: most loaded worker / mean", Unit: "×", Ours: one(f.balance(f.base)), Base: ptr(one(f.balance(f.free))), BaseName: "unbounded",
			Note: fmt.Sprintf("%.1f buckets per worker (keyspace.SessionBuckets = %d); bound: slack %g (poller.DefaultBalanceSlack); unbounded: plain rendezvous of the buckets", float64(assign.Buckets)/float64(workers), assign.Buckets, f.slack)},
	}

	// Sampled workers: per-worker round work and memory.
	var bucketsMs, lookupMs, idB, defB, held, wrong []float64
	var own, watch []float64
	for _, w := range sample(workers, sz.simSample) {
		sw := f.worker(w)
		bucketsMs = append(bucketsMs, sw.bucketsMs)
		lookupMs = append(lookupMs, sw.lookupMs)
		idB = append(idB, sw.idBytes)
		defB = append(defB, sw.defBytes/float64(max(sw.sessions, 1)))
		held = append(held, float64(sw.sessions))
		wrong = append(wrong, float64(sw.wrong))
		own, watch = append(own, float64(sw.ownBuckets)), append(watch, float64(sw.watchBuckets))
	}
	plB, err := f.plannerBytes()
	if err != nil {
		return rows, err
	}
	ideal := float64(pop.n) / float64(workers)
	sampleNote := fmt.Sprintf("%d of %d workers sampled evenly; sessions per sampled worker median %.0f, max %.0f (ideal %.0f); owned buckets median %.0f, watched %.0f",
		len(held), workers, bench.Summarize(held).Median, bench.Summarize(held).Max, ideal, bench.Summarize(own).Median, bench.Summarize(watch).Median)
	m := simMemory(plB, mean(idB), bench.Summarize(held).Median)
	rows = append(rows,
		Row{Figure: pre + "per worker and full round: Placement.Buckets(me)", Unit: "ms", Ours: bench.Summarize(bucketsMs), Note: sampleNote},
		Row{Figure: pre + "per worker and full round: the owner of each session it reads (the round's decision looks it up per session)", Unit: "ms", Ours: bench.Summarize(lookupMs),
			Note: "poller's decide is unexported: the scenario times the placement lookup it makes per session (Placement.OwnerOf); the rest of decide is map work on the same sessions"},
		Row{Figure: pre + "sessions the planner's lookup placed elsewhere than the plan (must be 0)", Target: "0", Unit: "sessions", Ours: bench.Summarize(wrong), Met: met(bench.Summarize(wrong).Max == 0)},
		Row{Figure: pre + "memory per worker: planner (fleet + placement, measured)", Unit: "MB", Ours: one(plB / 1e6)},
		Row{Figure: pre + "memory per worker: bucket id lists (owned + watched, measured)", Unit: "MB", Ours: bench.Summarize(scale(idB, 1e-6))},
		Row{Figure: pre + "memory per worker: a definition (session.Session, measured)", Unit: "B", Ours: bench.Summarize(defB)},
		Row{Figure: pre + "memory per worker: total (planner + ids + held sessions at the measured 2.2 KB each)", Unit: "MB", Ours: one(m / 1e6),
			Note: "held session: the live heap per held session of BenchmarkHeldSessionMemory (poller, `--record all`, 2.1–2.2 KB: lease, poll loop, schedule record, definition, state; BENCHMARKS.md, per-process cost); not re-measured here"},
	)

	joins, err := f.joins(ctx, sz.simJoins)
	if err != nil {
		return rows, err
	}
	leaves, err := f.leaves(ctx, sample(workers, sz.simLeaves))
	if err != nil {
		return rows, err
	}
	restart := 2 * mean(leaves.all) * float64(workers)
	restartFree := 2 * mean(leaves.free) * float64(workers)
	restartNote := fmt.Sprintf("a leave then a rejoin of each worker in turn: 2 × the sum of the leaves' moves; leaves planned for %d of %d workers", len(leaves.all), workers)
	if len(leaves.all) < workers {
		l := bench.Summarize(leaves.all)
		restartNote += fmt.Sprintf(" (sampled evenly; per leave median %.0f, p99 %.0f, max %.0f: the mean scales)", l.Median, l.P99, l.Max)
	}
	ideal1 := float64(pop.n) / float64(workers+1)
	rows = append(rows,
		Row{Figure: pre + "sessions moved per join", Unit: "sessions", Ours: bench.Summarize(joins.all), Base: ptr(bench.Summarize(joins.free)), BaseName: "unbounded",
			Note: fmt.Sprintf("%d joins, each planned from the base fleet by the real planner; ideal (a 1/(N+1) share) %.0f", len(joins.all), ideal1)},
		Row{Figure: pre + "sessions moved per join / ideal share", Target: "≤ 1.05 (hrw scenario, 10 workers)", Ours: bench.Summarize(scale(joins.all, 1/ideal1)),
			Base: ptr(bench.Summarize(scale(joins.free, 1/ideal1))), BaseName: "unbounded"},
		Row{Figure: pre + "of those, moved between old workers (the load bound's collateral)", Unit: "sessions", Ours: bench.Summarize(joins.collateral)},
		Row{Figure: pre + "sessions moved per leave", Unit: "sessions", Ours: bench.Summarize(leaves.all), Base: ptr(bench.Summarize(leaves.free)), BaseName: "unbounded"},
		Row{Figure: pre + "of those, moved between survivors (the load bound's collateral)", Unit: "sessions", Ours: bench.Summarize(leaves.collateral)},
		Row{Figure: pre + "sessions moved by a rolling restart of the whole fleet", Unit: "sessions", Ours: one(restart), Base: ptr(one(restartFree)), BaseName: "unbounded", Note: restartNote},
		Row{Figure: pre + "rolling restart: planner CPU per worker (every worker plans each of the 2N membership changes)", Unit: "s", Ours: one(2 * float64(workers) * bench.Summarize(member).Median / 1e3)},
		Row{Figure: pre + "rolling restart: moves per session", Unit: "×", Ours: one(restart / float64(pop.n)), Base: ptr(one(restartFree / float64(pop.n))), BaseName: "unbounded"},
	)

	for _, slack := range sz.simSlacks {
		bal, ratio, err := f.slackWhatIf(slack)
		if err != nil {
			return rows, err
		}
		rows = append(rows, Row{Figure: fmt.Sprintf("%swhat if the slack were %g: sessions moved per join / ideal share (balance most loaded / mean)", pre, slack),
			Ours: one(ratio), Note: fmt.Sprintf("balance %.2f; one join planned by the real planner at this slack (the workers run %g)", bal, f.slack)})
	}

	calls, leases, single := f.renewCalls(simBatch)
	model := simModel{workers: workers, sessions: pop.n, slotCalls: calls, slotLeases: leases, singleCalls: single,
		joinMoves: mean(joins.all), restartMoves: restart}
	rows = append(rows, model.rows(pre)...)
	tagged := model
	tagged.slotCalls, tagged.slotLeases = f.bucketTaggedCalls(simBatch)
	if m, busy, ok := tagged.masters(0); ok {
		rows = append(rows, Row{Figure: pre + "what if lease keys were hash-tagged by bucket: Redis masters needed, leases and rounds only", Ours: one(float64(m)),
			Note: fmt.Sprintf("not pollworker's key layout: a bucket's leases in one slot, so Cluster calls carry up to %d; busiest master %.0f ops/s, %.0f%% of a core", simBatch, busy.ops, 100*busy.cpu)})
	}
	return rows, ctx.Err()
}

func scale(xs []float64, k float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x * k
	}
	return out
}
