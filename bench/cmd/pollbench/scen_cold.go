package main

import (
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/internal/redisstats"
	"github.com/pollworker/pollworker/scripts/lua"
)

// runCold seeds coldSessions sessions, starts coldWorkers coordinators at
// once and measures the time until every session has been polled, and the
// Redis memory per session (definition, index entry, lease and fence).
func runCold(ctx context.Context, e *env, sz sizes) ([]Row, error) {
	var secs, mem, churn, redisCPU, perLease []float64
	var busiest, scripts string
	var runs []string
	var rounds, memberRounds []float64
	for r := 0; r < sz.coldRuns; r++ {
		if err := e.reset(ctx); err != nil {
			return nil, err
		}
		before, err := redisstats.Read(ctx, e.admin)
		if err != nil {
			return nil, err
		}
		if err := bench.Seed(ctx, e.admin, e.keys, bench.SequentialIDs(sz.coldSessions), time.Hour); err != nil {
			return nil, err
		}
		seeded, err := redisstats.Read(ctx, e.admin)
		if err != nil {
			return nil, err
		}
		rec := bench.NewRecorder()
		all := rec.WaitPolled(sz.coldSessions)
		acquiredBefore := e.acquired.Load()
		roundsBefore, memberRoundsBefore := e.rounds.Load(), e.memberRounds.Load()
		scriptsBefore := e.counter.Scripts()
		t0 := time.Now()
		var ms []*member
		for _, id := range workerIDs("w", sz.coldWorkers) {
			m, err := e.startOurs(id, "", defaultTimings(), rec)
			if err != nil {
				stopAll(ms)
				return nil, err
			}
			ms = append(ms, m)
		}
		err = waitChan(ctx, all, sz.timeout, "every session polled")
		el := time.Since(t0)
		at, last := rec.FirstPolls(t0, sz.coldSessions, coldMilestones, 5)
		runs = append(runs, coldRunNote(r, at, last))
		acquired := e.acquired.Load() - acquiredBefore
		rounds = append(rounds, float64(e.rounds.Load()-roundsBefore)/float64(sz.coldWorkers))
		memberRounds = append(memberRounds, float64(e.memberRounds.Load()-memberRoundsBefore)/float64(sz.coldWorkers))
		churn = append(churn, float64(acquired)/float64(sz.coldSessions))
		if err == nil {
			after, serr := redisstats.Read(ctx, e.admin)
			if serr == nil {
				mem = append(mem, float64(after.UsedMemory-before.UsedMemory)/float64(sz.coldSessions))
				d := after.Delta(seeded)
				redisCPU = append(redisCPU, d.CPUSeconds)
				perLease = append(perLease, d.CPUSeconds*1e6/float64(max(acquired, 1)))
				busiest = busiestCommands(d, 12)
				scripts = scriptCalls(scriptsBefore, e.counter.Scripts())
			}
		}
		stopAll(ms)
		if err != nil {
			return nil, fmt.Errorf("%w (%d of %d polled; %s)", err, rec.Polled(), sz.coldSessions, runs[len(runs)-1])
		}
		secs = append(secs, el.Seconds())
	}
	s := bench.Summarize(secs)
	coldMet := met(s.Median < 10)
	if sz.coldSessions < 1_000_000 || sz.coldWorkers < 50 {
		coldMet = "n/a (target is for 1M over 50)"
	}
	return []Row{
		{Figure: fmt.Sprintf("cold start, %d sessions over %d workers: all polled", sz.coldSessions, sz.coldWorkers),
			Target: "1M over 50 in < 10 s", Unit: "s", Ours: s, Met: coldMet,
			Note: fmt.Sprintf("%d runs; each worker reads the ids and definitions of its own index buckets only (≤ 20k definitions per round, leases in requests of 1000); all workers and redis-server share the machine's cores; time until this share of the sessions was polled once, and the last sessions polled: %s", sz.coldRuns, strings.Join(runs, "; "))},
		{Figure: "leases acquired per session until all polled (1 = no churn)", Target: "reported", Unit: "x", Ours: bench.Summarize(churn),
			Note: "workers start together and see each other join one by one; sessions taken before the fleet is complete move again"},
		{Figure: "rounds per worker until all polled", Target: "reported", Unit: "", Ours: bench.Summarize(rounds),
			Note: fmt.Sprintf("of which rounds that saw the membership change (each one looks at every session the worker reads): median %.1f per worker", bench.Summarize(memberRounds).Median)},
		{Figure: "Redis CPU during the cold start", Target: "reported", Unit: "s", Ours: bench.Summarize(redisCPU),
			Note: "busiest commands (last run, Redis CPU): " + busiest + "; the script calls (evalsha) by script, with the keys they passed: " + scripts},
		{Figure: "Redis CPU per lease acquired during the cold start, all commands", Target: "reported", Unit: "µs", Ours: bench.Summarize(perLease),
			Note: "the CPU time of everything Redis ran (session loads, heartbeats, renewals included) over the leases acquired; the script alone: lease BenchmarkScriptAcquire1000"},
		{Figure: "Redis memory per session (definition + index + lease; a fencing record from the first release)", Target: "reported", Unit: "B", Ours: bench.Summarize(mem)},
	}, nil
}

// coldMilestones are the shares of the sessions whose first-poll time the
// cold start reports per run: a slow start and a long tail look alike in
// the time until all are polled.
var coldMilestones = []float64{0.5, 0.9, 0.99, 0.999, 1}

// coldRunNote says when each milestone was reached in run r and which
// sessions came last.
func coldRunNote(r int, at []time.Duration, last []string) string {
	parts := make([]string, len(at))
	for i, d := range at {
		parts[i] = fmt.Sprintf("%g %% at %.2f s", 100*coldMilestones[i], d.Seconds())
		if d < 0 {
			parts[i] = fmt.Sprintf("%g %% not reached", 100*coldMilestones[i])
		}
	}
	return fmt.Sprintf("run %d: %s (last: %s)", r+1, strings.Join(parts, ", "), strings.Join(last, ", "))
}

// busiestCommands names the n commands that used the most Redis CPU in d,
// with their calls and seconds.
func busiestCommands(d redisstats.Stats, n int) string {
	names := slices.Collect(maps.Keys(d.Commands))
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(d.Commands[b].Usec, d.Commands[a].Usec) })
	var parts []string
	for _, name := range names[:min(n, len(names))] {
		c := d.Commands[name]
		parts = append(parts, fmt.Sprintf("%s %d calls %.2f s", name, c.Calls, float64(c.Usec)/1e6))
	}
	return strings.Join(parts, ", ")
}

// scriptCalls names the script calls made between two counts, busiest
// first: "acquire 2,046 calls 2,001,400 keys, ...".
func scriptCalls(before, after map[string]bench.ScriptCalls) string {
	names := map[string]string{}
	for name, src := range map[string]string{
		"acquire": lua.Acquire, "renew": lua.Renew, "release": lua.Release, "unheld": lua.Unheld, "fresh": lua.Fresh,
		"inspect": lua.Inspect, "session_changes": lua.SessionChanges, "session_changed": lua.SessionChanged,
		"session_loads": lua.SessionLoads, "node_heartbeat": lua.NodeHeartbeat, "node_members": lua.NodeMembers,
		"node_claim": lua.NodeClaim, "node_unclaim": lua.NodeUnclaim, "node_leave": lua.NodeLeave, "node_holder": lua.NodeHolder,
		"state_slot": lua.StateSlot,
	} {
		sum := sha1.Sum([]byte(src))
		names[hex.EncodeToString(sum[:])] = name
	}
	type row struct {
		name string
		c    bench.ScriptCalls
	}
	var rows []row
	for sha, c := range after {
		c.Calls -= before[sha].Calls
		c.Keys -= before[sha].Keys
		if c.Calls == 0 {
			continue
		}
		name, ok := names[sha]
		if !ok {
			name = "other " + sha[:min(8, len(sha))]
		}
		rows = append(rows, row{name, c})
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Or(cmp.Compare(b.c.Calls, a.c.Calls), strings.Compare(a.name, b.name)) })
	var parts []string
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %d calls %d keys", r.name, r.c.Calls, r.c.Keys))
	}
	return strings.Join(parts, ", ")
}
