// Command pollbench measures pollworker against a real redis-server that it
// starts on a loopback port: rendezvous hashing, lease renewal, graceful
// handoff, crash failover, join rebalance, steady-state Redis load and cold
// start, each side by side with the naive design of package bench/baseline
// (or, for hashing, github.com/dgryski/go-rendezvous) in the same run; and
// sessions added one by one to a settled fleet (moves per add, extra polls),
// next to the planner it replaced; and the renew, cold and steady workloads
// on a 3-master Redis Cluster next to the single server (-only cluster).
// "-only sim" (not run otherwise) drives the real planner for 10M simulated
// sessions over 100 to 1,000 workers without Redis, and prices what it
// places with a Redis cost model calibrated from the measured costs
// (scen_sim.go, scen_sim_model.go).
//
//	cd bench   # the benchmarks are a Go module of their own
//	go run ./cmd/pollbench [-quick] [-json out.json] [-md out.md]
//
// Every figure is the median and p99 over repeated runs (5, or 3 with -quick).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

func main() {
	// The crash scenario makes one worker's client fail to dial on purpose;
	// go-redis would log every failed attempt.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pollbench:", err)
		os.Exit(1)
	}
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pollbench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "small sizes and 3 runs (under 2 minutes)")
	jsonOut := fs.String("json", "", "write the report as JSON to this file")
	mdOut := fs.String("md", "", "write the report as markdown to this file")
	only := fs.String("only", "", "comma-separated scenarios to run ("+scenarioNames()+"); default all but sim")
	cold := fs.String("cold", "", "override the cold-start size as SESSIONSxWORKERS, e.g. 1000000x50")
	e2eFleet := fs.Int("e2e-fleet", 0, "run e2e only as one worker and then a fleet of 5 (as they start, and with each at GOMAXPROCS = its share of the cores) on this many sessions: the fleet-of-5 figure alone")
	e2eOnly := fs.String("e2e-sizes", "", "run e2e only at these comma-separated sessions per worker, e.g. 1000,5000 (sorted, duplicates dropped): the per-size comparison and the sustainable size among them, without the overload, changes and fleet runs")
	verbose := fs.Bool("v", false, "log the workers' warnings to stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memProfile := fs.String("memprofile", "", "write an allocation profile at the end of the run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		defer func() {
			if f, err := os.Create(*memProfile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	sz := fullSizes()
	if *quick {
		sz = quickSizes()
	}
	if *cold != "" {
		if _, err := fmt.Sscanf(*cold, "%dx%d", &sz.coldSessions, &sz.coldWorkers); err != nil {
			return fmt.Errorf("-cold %q: want SESSIONSxWORKERS: %w", *cold, err)
		}
	}
	if *e2eOnly != "" {
		for _, f := range strings.Split(*e2eOnly, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("-e2e-sizes %q: want positive session counts separated by commas", *e2eOnly)
			}
			sz.e2eSizes = append(sz.e2eSizes, n)
		}
		slices.Sort(sz.e2eSizes) // the search for the sustainable size goes up
		sz.e2eSizes = slices.Compact(sz.e2eSizes)
	}
	if *e2eFleet < 0 {
		return fmt.Errorf("-e2e-fleet %d: want a positive session count", *e2eFleet)
	}
	sz.e2eFleet = *e2eFleet
	if *verbose {
		sz.logger = zap.Must(zap.NewDevelopment(zap.IncreaseLevel(zap.WarnLevel)))
	}
	var sel map[string]bool
	if *only != "" {
		sel = map[string]bool{}
		for _, s := range strings.Split(*only, ",") {
			sel[strings.TrimSpace(s)] = true
		}
	}
	rep, err := runBench(ctx, sz, sel, stdout)
	if err != nil {
		return err
	}
	rep.Command = "cd bench && go run ./cmd/pollbench " + strings.Join(args, " ")
	rep.Command = strings.TrimSpace(rep.Command)
	rep.WriteText(stdout)
	if *jsonOut != "" {
		f, err := os.Create(*jsonOut)
		if err != nil {
			return err
		}
		if err := rep.WriteJSON(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if *mdOut != "" {
		f, err := os.Create(*mdOut)
		if err != nil {
			return err
		}
		rep.WriteMarkdown(f)
		if err := f.Close(); err != nil {
			return err
		}
	}
	if len(rep.Failures) > 0 {
		return fmt.Errorf("%d scenario(s) failed", len(rep.Failures))
	}
	return nil
}

// sizes are the knobs of one mode.
type sizes struct {
	mode string
	runs int

	hrwSessions, hrwNodes       int
	balanceSessions, balanceOn  int
	renewLeases, renewBaseCount int

	handoffSessions, handoffWorkers int
	handoffTTL                      time.Duration
	baseHandoffTTL                  time.Duration // the baseline's TTL (handoff only by expiry)

	crashSessions int
	crashTTL      time.Duration

	joinSessions, joinWorkers int
	joinInterval              time.Duration

	steadySessions, steadyWorkers int
	steadyInterval                time.Duration // renew, heartbeat and discovery interval of both designs
	steadyWindow                  time.Duration

	coldSessions, coldWorkers, coldRuns int

	addsSessions, addsWorkers, addsCount int
	addsPace                             time.Duration // time between two adds
	addsInterval                         time.Duration // every session's poll interval
	addsTTL                              time.Duration // lease TTL; the other intervals are a third of it

	e2eSizes []int // -e2e-sizes: only the per-size comparison at these sizes
	e2eFleet int   // -e2e-fleet: only the fleet-of-5 figure, at this many sessions

	// sim: sessions, fleet sizes, workers sampled for per-worker figures,
	// joins planned, leaves planned (a sample when below the fleet size).
	simSessions                    int
	simWorkers                     []int
	simSample, simJoins, simLeaves int
	simSlacks                      []float64 // what-ifs: other slacks planned

	timeout time.Duration // bound on any single wait
	logger  *zap.Logger   // workers' logger; nil = none
}

func fullSizes() sizes {
	return sizes{mode: "full", runs: 5,
		hrwSessions: 1_000_000, hrwNodes: 100, balanceSessions: 100_000, balanceOn: 10,
		renewLeases: 100_000, renewBaseCount: 10_000,
		handoffSessions: 10_000, handoffWorkers: 5, handoffTTL: 30 * time.Second, baseHandoffTTL: 30 * time.Second,
		crashSessions: 10_000, crashTTL: 3 * time.Second,
		joinSessions: 10_000, joinWorkers: 4, joinInterval: time.Second,
		steadySessions: 100_000, steadyWorkers: 10, steadyInterval: 10 * time.Second, steadyWindow: 10 * time.Second,
		coldSessions: 1_000_000, coldWorkers: 50, coldRuns: 3,
		addsSessions: 100_000, addsWorkers: 10, addsCount: 200, addsPace: 50 * time.Millisecond,
		addsInterval: time.Minute, addsTTL: 10 * time.Second,
		simSessions: 10_000_000, simWorkers: []int{100, 500, 1000}, simSample: 5, simJoins: 5, simLeaves: 60, simSlacks: []float64{0.1, 0.25},
		timeout: 150 * time.Second}
}

func quickSizes() sizes {
	return sizes{mode: "quick", runs: 3,
		hrwSessions: 100_000, hrwNodes: 100, balanceSessions: 100_000, balanceOn: 10,
		renewLeases: 20_000, renewBaseCount: 5_000,
		handoffSessions: 1_000, handoffWorkers: 5, handoffTTL: 30 * time.Second, baseHandoffTTL: 3 * time.Second,
		crashSessions: 1_000, crashTTL: 3 * time.Second,
		joinSessions: 2_000, joinWorkers: 4, joinInterval: time.Second,
		steadySessions: 10_000, steadyWorkers: 10, steadyInterval: time.Second, steadyWindow: 2 * time.Second,
		coldSessions: 50_000, coldWorkers: 10, coldRuns: 2,
		addsSessions: 2_000, addsWorkers: 3, addsCount: 100, addsPace: 20 * time.Millisecond,
		addsInterval: time.Minute, addsTTL: 1500 * time.Millisecond,
		simSessions: 1_000_000, simWorkers: []int{100, 500, 1000}, simSample: 3, simJoins: 3, simLeaves: 20, simSlacks: []float64{0.1, 0.25},
		timeout: 60 * time.Second}
}

// tinySizes are for the smoke test.
func tinySizes() sizes {
	return sizes{mode: "tiny", runs: 1,
		hrwSessions: 2_000, hrwNodes: 10, balanceSessions: 2_000, balanceOn: 4,
		renewLeases: 500, renewBaseCount: 100,
		handoffSessions: 60, handoffWorkers: 3, handoffTTL: 30 * time.Second, baseHandoffTTL: 1500 * time.Millisecond,
		crashSessions: 60, crashTTL: 1500 * time.Millisecond,
		joinSessions: 60, joinWorkers: 2, joinInterval: 200 * time.Millisecond,
		steadySessions: 200, steadyWorkers: 3, steadyInterval: 500 * time.Millisecond, steadyWindow: 500 * time.Millisecond,
		coldSessions: 300, coldWorkers: 3, coldRuns: 1,
		addsSessions: 200, addsWorkers: 3, addsCount: 20, addsPace: 20 * time.Millisecond,
		addsInterval: time.Minute, addsTTL: 1500 * time.Millisecond,
		simSessions: 20_000, simWorkers: []int{4, 16}, simSample: 2, simJoins: 2, simLeaves: 16, simSlacks: []float64{0.25},
		timeout: 15 * time.Second}
}

type scenario struct {
	name string
	run  func(ctx context.Context, e *env, sz sizes) ([]Row, error)
}

var scenarios = []scenario{
	{"hrw", runHRW},
	{"renew", runRenew},
	{"handoff", runHandoff},
	{"crash", runCrash},
	{"join", runJoin},
	{"steady", runSteady},
	{"cold", runCold},
	{"adds", runAdds},
	{"e2e", runE2E},
	{"load", runLoad},
	{"overload", runOverload},
	{"schedules", runSchedules},
	{"cluster", runCluster},
	{"sim", runSim},
}

// scenarioNames lists the scenarios' names, comma-separated.
func scenarioNames() string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	return strings.Join(names, ",")
}

// optIn are the scenarios that run only when -only names them: "sim" takes
// minutes at its full size and measures no Redis.
var optIn = map[string]bool{"sim": true}

func runBench(ctx context.Context, sz sizes, sel map[string]bool, progress io.Writer) (*Report, error) {
	start := time.Now()
	rep := &Report{Started: start, Mode: sz.mode, Runs: sz.runs, Machine: machine()}
	for _, s := range scenarios {
		if (sel != nil && !sel[s.name]) || (sel == nil && optIn[s.name]) {
			continue
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		t0 := time.Now()
		fmt.Fprintf(progress, "running %s… (%d goroutines)\n", s.name, runtime.NumGoroutine())
		// Each scenario gets a fresh redis-server and a collected heap, so
		// that none inherits the memory state the previous ones left.
		runtime.GC()
		e, err := newEnv(ctx)
		if err != nil {
			return nil, err
		}
		e.logger = sz.logger
		rows, err := s.run(ctx, e, sz)
		e.close()
		for i := range rows {
			rows[i].Scenario = s.name
		}
		rep.Rows = append(rep.Rows, rows...)
		if err != nil {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: %v", s.name, err))
		}
		fmt.Fprintf(progress, "  %s done in %s\n", s.name, time.Since(t0).Round(time.Millisecond))
	}
	rep.Elapsed = time.Since(start).Round(time.Second).String()
	return rep, nil
}
