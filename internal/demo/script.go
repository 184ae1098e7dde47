package demo

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pollworker/pollworker/fleet"
)

// nobody stands for "no worker" in moves and loads.
const nobody = "nobody"

// script runs the scenario: start, graceful stop of Stopped, a newcomer,
// end. Before each change it prints what the planner says will happen; then
// it waits until every session is where the plan puts it (at most
// Options.SettleTimeout), and prints what happened, measured. The steps
// come at fixed fractions of Duration, and a step whose placement took
// longer than the time to the next pushes the rest of the timeline back by
// as much: on a slow machine (a loaded one, -race) the run stretches
// instead of reporting placements that are only late. It returns early
// when ctx is done.
func (d *demo) script(ctx context.Context, start time.Time) error {
	tl := timeline{start: start, duration: d.opts.Duration}
	stopAt, joinAt, endAt := 1.0/3, 7.0/12, 1.0

	var names []string
	for i := range d.opts.Workers {
		names = append(names, fmt.Sprintf("worker-%d", i+1))
	}
	plan, plain, err := d.plan(ctx, names)
	if err != nil {
		return err
	}
	before := d.rec.snapshot()
	d.rec.logf(&before, "%d sessions on %d HTTP targets, embedded Redis at %s; starting %s",
		len(d.sessions), len(d.targets), d.mr.Addr(), strings.Join(names, ", "))
	d.rec.logf(&before, "leader election on this Redis, from the repository in another terminal: %s", d.electionCommand())
	d.rec.logf(&before, "the planner places them: %s", planned(plan, plain, d.sessions))
	for _, n := range names {
		if err := d.startWorker(ctx, n); err != nil {
			return err
		}
	}
	d.report(d.settle(ctx, plan, before), "the start", "")
	tl.catchUp(stopAt)

	// A graceful stop: the worker stops its polls, releases its leases and
	// tells the others, who take the sessions at once.
	if !sleepUntil(ctx, tl.at(stopAt)) {
		return nil
	}
	w := d.worker(Stopped)
	if plan, plain, err = d.plan(ctx, without(d.liveNames(), Stopped)); err != nil {
		return err
	}
	before = d.rec.snapshot()
	d.rec.logf(&before, "stopping %s gracefully (it holds %d sessions)", w.name, before.counts()[w.name])
	d.rec.logf(&before, "without %s the planner puts %s; to move: %s", w.name, planned(plan, plain, d.sessions), formatMoves(d.moves(before.holders, plan.OwnerOf)))
	err = d.stopWorker(w)
	after := d.rec.snapshot()
	if err != nil {
		d.rec.logf(&after, "%s: drain failed: %v", w.name, err)
	} else {
		d.rec.logf(&after, "%s drained in %v", w.name, (after.at - before.at).Round(time.Millisecond))
	}
	d.report(d.settle(ctx, plan, before), "the stop", "")
	tl.catchUp(joinAt)

	// A newcomer takes the sessions the planner gives it.
	if !sleepUntil(ctx, tl.at(joinAt)) {
		return nil
	}
	name := fmt.Sprintf("worker-%d", d.opts.Workers+1)
	if plan, plain, err = d.plan(ctx, append(d.liveNames(), name)); err != nil {
		return err
	}
	before = d.rec.snapshot()
	d.rec.logf(&before, "%s joins; the planner gives it %d of %d sessions: %s; to move: %s",
		name, sessionsOf(plan, d.sessions)[name], len(d.sessions), planned(plan, plain, d.sessions), formatMoves(d.moves(before.holders, plan.OwnerOf)))
	if err := d.startWorker(ctx, name); err != nil {
		return err
	}
	d.report(d.settle(ctx, plan, before), "the join", name)
	tl.catchUp(endAt - 1.0/12)

	if !sleepUntil(ctx, tl.at(endAt)) {
		return nil
	}
	// A lease lost meanwhile (Redis too slow for the demo's short TTL)
	// is taken again by its planned worker: wait for that too.
	now := d.settle(ctx, plan, d.rec.snapshot()).now
	d.report(d.compare(plan, now, now), "", "")
	return nil
}

// timeline places the script's steps at fractions of duration after
// start, pushed back by how late the placements came.
type timeline struct {
	start    time.Time
	duration time.Duration
	late     time.Duration // added to every step: the placements' delays so far
}

// at is the time of the step at fraction frac.
func (t *timeline) at(frac float64) time.Time {
	return t.start.Add(t.late + time.Duration(frac*float64(t.duration)))
}

// catchUp pushes the steps back if it is already past the one at frac,
// so that the gap before it is kept.
func (t *timeline) catchUp(frac float64) {
	if over := time.Since(t.at(frac)); over > 0 {
		t.late += over
	}
}

// outcome is the placement at one moment compared with a plan.
type outcome struct {
	plan      *fleet.Plan
	before    snapshot // when the change began
	now       snapshot
	misplaced []string // sessions whose lease its planned worker does not hold
}

// compare compares the placement of now with plan.
func (d *demo) compare(plan *fleet.Plan, before, now snapshot) outcome {
	o := outcome{plan: plan, before: before, now: now}
	for _, id := range d.sessions {
		if now.holders[id] != plan.OwnerOf(id) {
			o.misplaced = append(o.misplaced, id)
		}
	}
	return o
}

// settle waits until the placement matches plan, Options.SettleTimeout
// has passed or ctx is done, and returns the placement then.
func (d *demo) settle(ctx context.Context, plan *fleet.Plan, before snapshot) outcome {
	deadline := time.Now().Add(d.opts.SettleTimeout)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for {
		o := d.compare(plan, before, d.rec.snapshot())
		if len(o.misplaced) == 0 || !time.Now().Before(deadline) {
			return o
		}
		select {
		case <-ctx.Done():
			return o
		case <-ticker.C:
		}
	}
}

// report prints an outcome: after event ("the stop"), or at the end when
// event is "". With newcomer, it says how much of its share it holds.
func (d *demo) report(o outcome, event, newcomer string) {
	var b strings.Builder
	b.WriteString("placement ")
	if len(o.misplaced) == 0 {
		b.WriteString("as planned")
	} else {
		b.WriteString("not as planned")
	}
	if event == "" {
		b.WriteString(" at the end")
	} else {
		fmt.Fprintf(&b, " %v after %s", (o.now.at - o.before.at).Round(time.Millisecond), event)
	}
	counts := o.now.counts()
	for _, w := range o.plan.Fleet().IDs() {
		counts[w] += 0 // the plan's workers, even with none
	}
	fmt.Fprintf(&b, ": %s", formatLoads(counts, d.unowned(o.now)))
	if newcomer != "" {
		share, held := 0, 0
		for _, id := range d.sessions {
			if o.plan.OwnerOf(id) == newcomer {
				share++
				if o.now.holders[id] == newcomer {
					held++
				}
			}
		}
		if held == share {
			fmt.Fprintf(&b, " (%s took its share: %d of %d)", newcomer, held, share)
		} else {
			fmt.Fprintf(&b, " (%s holds %d of its %d)", newcomer, held, share)
		}
	}
	if m := d.moves(o.before.holders, func(id string) string { return o.now.holders[id] }); len(m) > 0 {
		fmt.Fprintf(&b, "; moved: %s", formatMoves(m))
	}
	if len(o.misplaced) > 0 {
		b.WriteString("; elsewhere: ")
		const shown = 4
		for i, id := range o.misplaced[:min(shown, len(o.misplaced))] {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s (planned %s, ", id, o.plan.OwnerOf(id))
			if w, ok := o.now.holders[id]; ok {
				fmt.Fprintf(&b, "held by %s since %.1fs)", w, d.rec.acquiredAt(id, w).Seconds())
			} else {
				b.WriteString("held by nobody)")
			}
		}
		if n := len(o.misplaced) - shown; n > 0 {
			fmt.Fprintf(&b, " and %d more", n)
		}
	}
	d.rec.logf(&o.now, "%s", b.String())
}

// move is a number of sessions whose lease went from one worker to
// another.
type move struct {
	from, to string
	n        int
}

// moves compares the holders of the sessions (session -> worker) with
// where they are going (by session id; "" for nobody), and counts the
// changes by pair of workers. Sessions nobody held are not counted: they
// are not moving, they are being started.
func (d *demo) moves(holders map[string]string, to func(id string) string) []move {
	n := map[[2]string]int{}
	for _, id := range d.sessions {
		from, ok := holders[id]
		if !ok {
			continue
		}
		dst := cmp.Or(to(id), nobody)
		if dst != from {
			n[[2]string{from, dst}]++
		}
	}
	out := make([]move, 0, len(n))
	for k, c := range n {
		out = append(out, move{from: k[0], to: k[1], n: c})
	}
	slices.SortFunc(out, func(a, b move) int { return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to)) })
	return out
}

// unowned is the number of sessions whose lease nobody held at s.
func (d *demo) unowned(s snapshot) int { return len(d.sessions) - len(s.holders) }

// formatMoves formats moves: "worker-2->worker-1 1, worker-2->worker-3 8".
func formatMoves(ms []move) string {
	if len(ms) == 0 {
		return "nothing"
	}
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%s->%s %d", m.from, m.to, m.n)
	}
	return strings.Join(parts, ", ")
}

// formatLoads formats sessions per worker, workers in name order, then
// the sessions nobody holds: "worker-1 15, worker-3 14, nobody 1".
func formatLoads(counts map[string]int, unowned int) string {
	names := slices.Sorted(maps.Keys(counts))
	parts := make([]string, 0, len(names)+1)
	for _, w := range names {
		parts = append(parts, fmt.Sprintf("%s %d", w, counts[w]))
	}
	if unowned > 0 || len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("%s %d", nobody, unowned))
	}
	return strings.Join(parts, ", ")
}

// planned formats the sessions a plan gives each worker and its cap, and
// the sessions plain rendezvous hashing would give the workers the bound
// held back: "worker-1 15, worker-3 15 (at most 48.3 polls/s each; plain
// rendezvous hashing would give worker-3 18)". The planner weighs buckets
// by their poll load (polls per day, see session.PollsPerDay), so its cap
// is a poll rate, not a number of sessions.
func planned(p, plain *fleet.Plan, sessions []string) string {
	counts, plainCounts := sessionsOf(p, sessions), sessionsOf(plain, sessions)
	caps := map[int]bool{}
	var over []string
	for _, w := range p.Fleet().IDs() {
		counts[w] += 0 // listed even with none
		caps[p.Cap(w)] = true
		if p.Bound(w) {
			over = append(over, fmt.Sprintf("%s %d", w, plainCounts[w]))
		}
	}
	var notes []string
	if len(caps) == 1 {
		for c := range caps {
			if c >= 0 {
				notes = append(notes, fmt.Sprintf("at most %s polls/s each", pollsPerSecond(c)))
			}
		}
	}
	if len(over) > 0 {
		notes = append(notes, "plain rendezvous hashing would give "+strings.Join(over, ", "))
	}
	s := formatLoads(counts, 0)
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, "; ") + ")"
	}
	return s
}

// sessionsOf counts the sessions the plan gives each worker.
func sessionsOf(p *fleet.Plan, sessions []string) map[string]int {
	out := map[string]int{}
	for _, id := range sessions {
		out[p.OwnerOf(id)]++
	}
	return out
}

// pollsPerSecond formats a load of polls per day as polls per second.
func pollsPerSecond(perDay int) string {
	return strconv.FormatFloat(float64(perDay)/86400, 'f', 1, 64)
}

// without returns names without name.
func without(names []string, name string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == name })
}

// sleepUntil waits until t; it reports false if ctx was done first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
