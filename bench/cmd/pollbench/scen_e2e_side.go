package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pollworker/pollworker/bench"
)

// The worker's CPU per poll against the limit loop's, side by side: the
// worker, the limit loop and the limit loop with XADD poll the same
// sessions at the same time, each with its own worker header, and are
// measured over one window. Run one after the other (e2eRun), the limit
// loop alone moved from 170 to 210 µs per poll between its runs minutes
// apart at 1k sessions, more than the difference being measured; side by
// side, whatever else loads the shared machine loads all three alike.

// sideRun is one window of the three processes side by side: CPU per
// poll (µs) of each.
type sideRun struct {
	ours, limit, limitX float64
}

// sideNames are the worker headers of the three processes.
const (
	sideWorker = "w-0"
	sideLimit  = "limit"
	sideLimitX = "limit-xadd"
)

// sideBySide runs the worker and the two limit loops at once on n
// sessions, waits until each polled every session and the worker's
// warm-up passed, and measures their CPU per poll over one window.
func (x *e2e) sideBySide(ctx context.Context, n int) (sideRun, error) {
	ids := e2eIDs("e2e", n)
	if err := x.apply(ctx, ids); err != nil {
		return sideRun{}, err
	}
	x.target.clear()
	mark := x.target.now()
	type proc struct {
		name string
		p    *e2eProc
	}
	var procs []proc
	defer func() {
		for _, pr := range procs {
			_ = pr.p.stop(15 * time.Second)
		}
	}()
	for _, name := range []string{sideWorker, sideLimit, sideLimitX} {
		var p *e2eProc
		var err error
		if name == sideWorker {
			p, err = x.startWorker(name, "all")
		} else {
			p, err = x.startLimitAs(name, ids, name == sideLimitX, 0)
		}
		if err != nil {
			return sideRun{}, err
		}
		procs = append(procs, proc{name, p})
	}
	for _, pr := range procs {
		if err := x.waitPolled(ctx, pr.p, mark, pr.name, n); err != nil {
			return sideRun{}, fmt.Errorf("%w (log %s)", err, pr.p.log)
		}
	}
	if err := sleepCtx(ctx, x.sz.warmOurs); err != nil {
		return sideRun{}, err
	}
	cpu0 := make([]time.Duration, len(procs))
	for i, pr := range procs {
		c, err := procCPU(pr.p.cmd.Process.Pid)
		if err != nil {
			return sideRun{}, err
		}
		cpu0[i] = c
	}
	from := x.target.now()
	if err := sleepCtx(ctx, x.sz.window); err != nil {
		return sideRun{}, err
	}
	to := x.target.now()
	per := make([]float64, len(procs))
	for i, pr := range procs {
		c, err := procCPU(pr.p.cmd.Process.Pid)
		if err != nil {
			return sideRun{}, err
		}
		polls := x.target.arrivals(from, to, pr.name)
		if polls == 0 {
			return sideRun{}, fmt.Errorf("%s polled nothing in the window (log %s)", pr.name, pr.p.log)
		}
		per[i] = float64((c - cpu0[i]).Microseconds()) / float64(polls)
	}
	var errs []error
	for _, pr := range procs {
		if err := pr.p.stop(15 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	procs = nil
	return sideRun{ours: per[0], limit: per[1], limitX: per[2]}, errors.Join(errs...)
}

// sideRow is the row of the side-by-side runs at n sessions: the worker's
// CPU per poll over the limit loop's (without XADD: the stricter), run by
// run; met when every run is within 1.2×.
func sideRow(n int, runs []sideRun) Row {
	ratios := make([]float64, len(runs))
	var parts, partsX []string
	for i, r := range runs {
		ratios[i] = r.ours / r.limit
		parts = append(parts, fmt.Sprintf("%.1f/%.1f µs = %.2f×", r.ours, r.limit, ratios[i]))
		partsX = append(partsX, fmt.Sprintf("%.2f×", r.ours/r.limitX))
	}
	return Row{
		Figure: fmt.Sprintf("worker CPU per poll ÷ the limit loop's, side by side in one window, %d sessions", n),
		Target: "≤ 1.2× in every run", Unit: "x", Ours: bench.Summarize(ratios), Met: met(len(runs) > 0 && slices.Max(ratios) <= 1.2),
		Note: fmt.Sprintf("the worker (recording every result), the limit loop and the limit loop with XADD poll the same sessions at once, each measured by its own CPU over the same window; per run, worker / limit: %s; worker / limit+XADD: %s",
			strings.Join(parts, ", "), strings.Join(partsX, ", ")),
	}
}
