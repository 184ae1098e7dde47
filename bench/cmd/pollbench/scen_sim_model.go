package main

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
)

// The Redis cost model of the "sim" scenario. Costs are Redis CPU
// (used_cpu_user + used_cpu_sys) per unit, in µs, each from a measurement
// named in its comment; the fleet's default intervals and batch size are
// the library's. Operations are counted as INFO commandstats counts them:
// every command, those run inside scripts included.
const (
	// simBatch is the renewal batch: lease.DefaultBatchSize sessions per
	// script call (one hash slot per call under Redis Cluster).
	simBatch = lease.DefaultBatchSize
	// costRenewLease: a lease renewed in a call of 500 (renew.lua: its
	// share of one MGET, one PEXPIRE). BENCHMARKS.md full run, "Redis CPU
	// per renewal cycle, 100000 leases": 146.4 ms.
	costRenewLease = 1.46
	// costCall: a script call's own cost besides its leases (reading,
	// parsing, dispatching and replying to one EVALSHA). lease's
	// BenchmarkScriptRenewCalls: calls of one lease 6.27 µs each against
	// 2.35 µs per lease in calls of 500, same run (median of 3, load 8–14).
	costCall = 3.9
	// costAcquire: a free lease taken at a cold start (no fencing record),
	// in a call of 1000. BENCHMARKS.md "Acquisition cost": 4.38 µs.
	costAcquire = 4.38
	// costAcquireCall: an acquire script call's own cost besides its
	// leases (it also reads TIME, INFO and the slot's loss marker once per
	// call). pollbench -quick -only cluster (05:18 UTC, load 8): 20,000
	// acquisitions cost Redis 22.79 µs each over 23,036 calls on 3 masters
	// against 7.30 µs in calls of 500 on one server, so (22.79 − 7.30) ×
	// 20,000 / 23,036 = 13.4 µs per call.
	costAcquireCall = 13.4
	// costAcquireHandoff: a lease taken after a graceful release (the mark
	// read and turned into a gap and a due time). Same table: 6.48 µs.
	costAcquireHandoff = 6.48
	// costRelease: a lease released with its handoff mark. lease's
	// BenchmarkScriptRelease500: 3.6–5.0 µs per lease (2 runs, load ~13).
	costRelease = 4.3
	// costEntry: one member read (a pipelined GET of a heartbeat info, or
	// an entry of the node index's ZRANGE). session's BenchmarkFetch: the
	// server's CPU per definition read by a pipelined GETRANGE, 0.85–1 µs
	// (BENCHMARKS.md, micro-benchmarks).
	costEntry = 0.85
	// costXADD: a poll result recorded (`--record all`: one XADD per
	// poll). BENCHMARKS.md e2e, "Redis CPU per poll, 20000 sessions,
	// limit+XADD": 1.62 µs.
	costXADD = 1.62
	// simBudget is the Redis CPU a master may spend in steady state, in
	// cores: half of its one thread, leaving the other half for a cold
	// start, a rolling restart, replication and the fork of a save.
	simBudget = 0.5
	// scriptsPerRound are the script calls of one worker's round besides
	// renewals: heartbeat (node_heartbeat.lua), membership
	// (node_members.lua) and session changes (session_changes.lua); each
	// runs about three commands inside.
	scriptsPerRound = 3
	opsPerScript    = 4 // the EVALSHA and about three commands inside
)

// simModel turns one simulated fleet's placement into Redis load.
type simModel struct {
	workers, sessions int
	// slotCalls[s] and slotLeases[s]: renewal calls and leases of hash
	// slot s per cycle over the fleet under Redis Cluster (one slot per
	// call); singleCalls: calls per cycle on a single server.
	slotCalls, slotLeases []int
	singleCalls           int
	joinMoves             float64 // sessions moved per join (mean)
	restartMoves          float64 // sessions moved per rolling restart
}

// load is Redis work per second.
type load struct{ ops, cpu float64 } // operations/s; CPU in cores

func (a load) add(b load) load { return load{a.ops + b.ops, a.cpu + b.cpu} }

// renewals is the renewal load per second on master j of m (m = 1: a
// single server, whose calls batch any slots together).
func (md simModel) renewals(j, m int) load {
	every := poller.DefaultRenewInterval.Seconds()
	if m == 1 {
		return renewLoad(md.singleCalls, md.sessions, every)
	}
	calls, leases := 0, 0
	for s := range md.slotCalls {
		if masterOf(s, m) == j {
			calls += md.slotCalls[s]
			leases += md.slotLeases[s]
		}
	}
	return renewLoad(calls, leases, every)
}

// renewLoad is calls script calls renewing leases leases every `every`
// seconds: per call an EVALSHA and its MGETs (1000 keys each), per lease
// a PEXPIRE.
func renewLoad(calls, leases int, every float64) load {
	mgets := calls // a call carries at most simBatch (≤ 1000) leases: one MGET
	ops := float64(calls+mgets+leases) / every
	cpu := (float64(calls)*costCall + float64(leases)*costRenewLease) / every / 1e6
	return load{ops, cpu}
}

// masterOf is the master of hash slot s among m masters that split the
// slots into equal ranges (as `redis-cli --cluster create` does).
func masterOf(s, m int) int { return s * m / keyspaceSlots }

// rounds is the load of the workers' rounds on master j of m: each worker
// every DiscoveryInterval runs scriptsPerRound scripts on the keys of the
// membership and the session index (one slot: the busiest master is
// counted as master 0) and reads the node index (one entry per member,
// same master) and every member's heartbeat info (node keys, spread over
// the masters).
func (md simModel) rounds(j, m int) load {
	every := poller.DefaultDiscoveryInterval.Seconds()
	w := float64(md.workers)
	spread := load{ops: w * w / float64(m) / every, cpu: w * w * costEntry / float64(m) / every / 1e6}
	if j != 0 {
		return spread
	}
	hot := load{ops: w * (scriptsPerRound*opsPerScript + 1) / every,
		cpu: w * (scriptsPerRound*costCall + w*costEntry) / every / 1e6}
	return spread.add(hot)
}

// records is the load of `--record all` on master j of m: one XADD per
// poll, sessions/interval polls per second, into the result stream of
// the session's bucket range (one stream on a single server,
// keyspace.ResultStreams under Redis Cluster, each in its own slot).
func (md simModel) records(j, m int, interval time.Duration) load {
	polls := float64(md.sessions) / interval.Seconds()
	share := 1.0
	if m > 1 {
		mine := 0
		for i := range keyspace.ResultStreams {
			if masterOf(streamSlot(i), m) == j {
				mine++
			}
		}
		share = float64(mine) / keyspace.ResultStreams
	}
	return load{polls * share, polls * share * costXADD / 1e6}
}

// streamSlot is the hash slot of result stream i (keyspace.ResultStream).
func streamSlot(i int) int { return int(keyspace.Slot(keyspace.Space{}.ResultStream(i))) }

// busiest is the load of the busiest of m masters.
func (md simModel) busiest(m int, record time.Duration) load {
	var top load
	for j := range m {
		l := md.renewals(j, m).add(md.rounds(j, m))
		if record > 0 {
			l = l.add(md.records(j, m, record))
		}
		if l.cpu > top.cpu {
			top = l
		}
	}
	return top
}

// masters returns the fewest masters whose busiest stays within simBudget
// (1: a single server), and its load; ok false when no count up to
// maxMasters does (a hot key bounds it).
func (md simModel) masters(record time.Duration) (m int, l load, ok bool) {
	const maxMasters = 1024
	for m = 1; m <= maxMasters; m = nextCount(m) {
		if l = md.busiest(m, record); l.cpu <= simBudget {
			return m, l, true
		}
	}
	return maxMasters, md.busiest(maxMasters, record), false
}

// nextCount steps through master counts: one by one to 64, then by an
// eighth.
func nextCount(m int) int {
	if m < 64 {
		return m + 1
	}
	return m + m/8
}

// total is the fleet's whole load on m masters.
func (md simModel) total(m int, record time.Duration) load {
	var t load
	for j := range m {
		t = t.add(md.renewals(j, m)).add(md.rounds(j, m))
		if record > 0 {
			t = t.add(md.records(j, m, record))
		}
	}
	return t
}

// rows reports the model for one fleet.
func (md simModel) rows(pre string) []Row {
	perWorker := float64(md.sessions) / float64(md.workers)
	calls := 0
	for _, c := range md.slotCalls {
		calls += c
	}
	rows := []Row{
		{Figure: pre + "renewal calls per worker and cycle: single server / Redis Cluster (one hash slot per call)", Unit: "calls",
			Ours: one(float64(calls) / float64(md.workers)), Base: ptr(one(float64(md.singleCalls) / float64(md.workers))), BaseName: "single server",
			Note: fmt.Sprintf("%.0f leases per worker, batches of %d (lease.DefaultBatchSize), renewed every %s (poller.DefaultRenewInterval); under Cluster a call holds one slot's leases: %.1f leases per call", perWorker, simBatch, poller.DefaultRenewInterval, float64(md.sessions)/float64(calls))},
	}
	variants := []struct {
		name   string
		record time.Duration
	}{{"leases and rounds only (no recording, or `--record changes` with unchanged results; any interval)", 0},
		{"`--record all`, every session at 1 s", time.Second},
		{"`--record all`, every session at 1 min", time.Minute},
		{"`--record all`, every session at 1 h", time.Hour}}
	for _, v := range variants {
		m, busy, ok := md.masters(v.record)
		t := md.total(m, v.record)
		kind := "masters"
		if m == 1 {
			kind = "single server"
		}
		masters := float64(m)
		note := fmt.Sprintf("%d %s: fleet %.0f ops/s, %.2f cores of Redis CPU; busiest master %.0f ops/s, %.0f%% of a core (budget %.0f%%)", m, kind, t.ops, t.cpu, busy.ops, 100*busy.cpu, 100*simBudget)
		if !ok {
			masters = math.NaN()
			note = fmt.Sprintf("no count up to %d masters keeps the busiest within budget: the %d result streams (keyspace.ResultStreams) bound recording at %.0f polls/s; at %d masters: busiest %.0f ops/s, %.0f%% of a core", m, keyspace.ResultStreams, keyspace.ResultStreams*simBudget/costXADD*1e6, m, busy.ops, 100*busy.cpu)
		}
		rows = append(rows,
			Row{Figure: pre + "Redis masters needed, " + v.name, Target: fmt.Sprintf("busiest ≤ %.0f%% of a core", 100*simBudget), Ours: one(masters), Note: note},
			Row{Figure: pre + "Redis ops/s on the busiest master at that count, " + v.name, Unit: "ops/s", Ours: one(busy.ops)},
		)
	}
	mCold, _, _ := md.masters(0)
	coldCalls := md.singleCalls
	if mCold > 1 {
		coldCalls = calls // acquisitions batch by slot as renewals do
	}
	cold := (float64(md.sessions)*costAcquire + float64(coldCalls)*costAcquireCall) / 1e6
	moveCPU := func(moves float64) float64 { return moves * (costRelease + costAcquireHandoff) / 1e6 }
	rows = append(rows,
		Row{Figure: pre + "Redis CPU of a cold start (every lease acquired once), whole fleet", Unit: "s",
			Ours: one(cold), Note: fmt.Sprintf("%.1f s per master at %d master(s): the least a cold start takes; %.2f µs per acquisition (BENCHMARKS.md, Acquisition cost) and %.1f µs per call, %d calls (batched as the renewals)", cold/float64(mCold), mCold, costAcquire, costAcquireCall, coldCalls)},
		Row{Figure: pre + "Redis CPU of a join (its moves released and acquired)", Unit: "s", Ours: one(moveCPU(md.joinMoves))},
		Row{Figure: pre + "Redis CPU of a rolling restart of the whole fleet", Unit: "s", Ours: one(moveCPU(md.restartMoves)),
			Note: fmt.Sprintf("%.1f µs per moved session (release %.1f + acquire after a release %.2f)", costRelease+costAcquireHandoff, costRelease, costAcquireHandoff)},
	)
	return rows
}

func ptr[T any](v T) *T { return &v }

// simLoadNote names the machine's load while the scenario ran.
func simLoadNote() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load average unknown"
	}
	note := "load average at the end (1, 5, 15 min): " + strings.Join(f[:3], ", ") + " on 2 cores"
	if cpu, ok := processCPU(); ok {
		note += fmt.Sprintf("; pollbench's CPU time so far %s", cpu.Round(time.Second))
	}
	return note
}

// simMemory is a worker's heap: its planner, its bucket id lists and its
// held sessions at the measured heap per held session.
func simMemory(planner, ids, held float64) float64 {
	const heldSession = 2200 // B: BenchmarkHeldSessionMemory, 2.1–2.2 KB
	return planner + ids + held*heldSession
}
