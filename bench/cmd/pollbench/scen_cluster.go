package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/internal/redisstats"
	"github.com/pollworker/pollworker/lease"
	"github.com/pollworker/pollworker/poller"
)

// clusterMasters is the number of masters of the cluster scenario.
const clusterMasters = 3

// redisTarget is a Redis deployment that the cluster scenario's workloads
// run against: the env's single server, or a cluster of masters.
type redisTarget struct {
	name    string
	admin   redis.UniversalClient // seeding and MarkFresh
	masters []*redis.Client       // one per master: flushes and statistics
	// client returns a new connection for one lease manager or worker.
	client func() redis.UniversalClient
	marked bool // the loss markers are written (reset)
}

// reset empties every master (but for the loss markers once written),
// its scripts and its statistics, and marks the keyspace fresh the first
// time (as env.reset does for the single server).
func (tg *redisTarget) reset(ctx context.Context, e *env) error {
	marker := e.keys.Epoch(0)
	marker = marker[:strings.IndexByte(marker, '{')+1] // the prefix of every marker key
	for _, m := range tg.masters {
		if err := tg.empty(ctx, m, marker); err != nil {
			return err
		}
		if err := m.ScriptFlush(ctx).Err(); err != nil {
			return err
		}
	}
	if !tg.marked {
		if _, err := lease.MarkFresh(ctx, tg.admin, e.keys); err != nil {
			return err
		}
		tg.marked = true
	}
	for _, m := range tg.masters {
		if err := m.ConfigResetStat(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}

// empty deletes every key of m, but once the loss markers are written
// (their keys start with marker) it keeps them: writing the 16384 markers
// of a cluster again (MarkFresh) takes a second or more. DEL, not UNLINK:
// no lazy freeing may run into the next measurement.
func (tg *redisTarget) empty(ctx context.Context, m *redis.Client, marker string) error {
	if !tg.marked {
		return m.FlushAll(ctx).Err()
	}
	pipe := m.Pipeline()
	iter := m.Scan(ctx, 0, "", 1000).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); !strings.HasPrefix(k, marker) {
			pipe.Del(ctx, k) // one key per call: a cluster node refuses keys of several slots
		}
		if pipe.Len() >= 1000 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	_, err := pipe.Exec(ctx)
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return err
}

// read reads every master's statistics.
func (tg *redisTarget) read(ctx context.Context) ([]redisstats.Stats, error) {
	out := make([]redisstats.Stats, len(tg.masters))
	for i, m := range tg.masters {
		st, err := redisstats.Read(ctx, m)
		if err != nil {
			return nil, err
		}
		out[i] = st
	}
	return out, nil
}

// work is what one workload measured on one target over its runs: the
// operations per second, each master's Redis CPU per operation (µs), and
// the commands of the last run summed over the masters.
type work struct {
	rate  []float64
	perOp [][]float64 // [run][master]
	last  redisstats.Stats
	// acquired (leases acquired per session) and lost (leases lost) are
	// the churn of a cold start, per run.
	acquired, lost []float64
}

// measure runs op (which returns the operations it did) between two reads
// of the masters' statistics, and records its rate and CPU per operation
// (scaled by perOp: 1e6 for µs per operation).
func (w *work) measure(ctx context.Context, tg *redisTarget, scale float64, op func() (int, error)) error {
	before, err := tg.read(ctx)
	if err != nil {
		return err
	}
	t0 := time.Now()
	n, err := op()
	el := time.Since(t0)
	if err != nil {
		return err
	}
	after, err := tg.read(ctx)
	if err != nil {
		return err
	}
	per := make([]float64, len(after))
	w.last = redisstats.Stats{Commands: map[string]redisstats.CommandStat{}}
	for i := range after {
		d := after[i].Delta(before[i])
		per[i] = d.CPUSeconds * scale / float64(max(n, 1))
		for k, c := range d.Commands {
			sum := w.last.Commands[k]
			w.last.Commands[k] = redisstats.CommandStat{Calls: sum.Calls + c.Calls, Usec: sum.Usec + c.Usec}
		}
	}
	w.rate = append(w.rate, float64(n)/el.Seconds())
	w.perOp = append(w.perOp, per)
	return nil
}

// total is the Redis CPU per operation summed over the masters, per run.
func (w *work) total() []float64 {
	out := make([]float64, len(w.perOp))
	for r, per := range w.perOp {
		for _, x := range per {
			out[r] += x
		}
	}
	return out
}

// busiest is the largest master's Redis CPU per operation, per run.
func (w *work) busiest() []float64 {
	out := make([]float64, len(w.perOp))
	for r, per := range w.perOp {
		out[r] = slices.Max(per)
	}
	return out
}

// split names each master's median CPU per operation (in unit) and its
// share.
func (w *work) split(unit string) string {
	if len(w.perOp) == 0 {
		return ""
	}
	sum := bench.Summarize(w.total()).Median
	var parts []string
	for i := range w.perOp[0] {
		col := make([]float64, len(w.perOp))
		for r := range w.perOp {
			col[r] = w.perOp[r][i]
		}
		m := bench.Summarize(col).Median
		parts = append(parts, fmt.Sprintf("master %d %.2f %s (%.0f%%)", i+1, m, unit, 100*m/max(sum, 1e-9)))
	}
	return strings.Join(parts, ", ")
}

// steadyUnit is the unit of the steady-state workload, whose load is
// fixed: it reports the Redis CPU, not a rate.
const steadyUnit = "Redis CPU %"

// clusterWorkloads are the renew, cold and steady workloads of the cluster
// scenario, in the order they are reported.
var clusterWorkloads = []struct {
	name, unit, what string
	size             func(sz sizes) string
	run              func(ctx context.Context, e *env, tg *redisTarget, sz sizes) (*work, error)
}{
	{"acquisitions", "acq/s", "one lease manager acquires the leases in one call (the renew scenario's setup)",
		func(sz sizes) string { return fmt.Sprintf("%d leases", sz.renewLeases) }, clusterAcquire},
	{"renewals", "renew/s", "RenewAll of those leases (the renew scenario)",
		func(sz sizes) string { return fmt.Sprintf("%d leases", sz.renewLeases) }, clusterRenew},
	{"cold start", "sessions/s", "workers start together on seeded sessions, until every session was polled (the cold scenario, smaller)",
		func(sz sizes) string {
			n, w := clusterColdSize(sz)
			return fmt.Sprintf("%d sessions over %d workers", n, w)
		}, clusterCold},
	{"steady state", steadyUnit, "a settled fleet that renews, heartbeats and discovers (the steady scenario)",
		func(sz sizes) string {
			return fmt.Sprintf("%d sessions over %d workers, every %v", sz.steadySessions, sz.steadyWorkers, sz.steadyInterval)
		}, clusterSteady},
}

// runCluster runs the renew, cold and steady workloads on the env's single
// redis-server and on a cluster of clusterMasters masters started here,
// and reports each cluster figure against the single server's with the
// scaling factor, and each master's Redis CPU per operation.
func runCluster(ctx context.Context, e *env, sz sizes) ([]Row, error) {
	t0 := time.Now()
	cl, err := bench.StartCluster(ctx, clusterMasters)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	startup := time.Since(t0)
	single := &redisTarget{name: "1 server", admin: e.admin, masters: []*redis.Client{e.admin},
		client: func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: e.redis.Addr()}) }}
	cluster := &redisTarget{name: fmt.Sprintf("%d masters", clusterMasters),
		client: func() redis.UniversalClient { return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}) }}
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer admin.Close()
	cluster.admin = admin
	for _, a := range cl.Addrs() {
		m := redis.NewClient(&redis.Options{Addr: a})
		defer m.Close()
		cluster.masters = append(cluster.masters, m)
	}
	caveat := fmt.Sprintf("this machine has %d CPUs: the %d masters, the single server and the client share them, so the measured throughput factor cannot show scaling out; the projected factor (the single server's Redis CPU per operation over the busiest master's) is what %d masters on their own cores would give when Redis is the bottleneck", runtime.NumCPU(), clusterMasters, clusterMasters)
	idle, err := idleCPU(ctx, single, cluster, sz.steadyWindow)
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, wl := range clusterWorkloads {
		if sz.mode == "tiny" && wl.unit == steadyUnit {
			continue // the smoke test: the steady state's waits would double this scenario's time
		}
		var res [2]*work
		for i, tg := range []*redisTarget{single, cluster} {
			w, err := wl.run(ctx, e, tg, sz)
			if err != nil {
				return rows, fmt.Errorf("%s on %s: %w", wl.name, tg.name, err)
			}
			res[i] = w
		}
		rows = append(rows, clusterRows(wl.name+", "+wl.size(sz), wl.unit, wl.what, res[0], res[1], caveat, idle)...)
	}
	rows[0].Note += fmt.Sprintf("; cluster started in %v", startup.Round(time.Millisecond))
	return rows, nil
}

// idleCPU measures the Redis CPU of both targets with no client, in one
// window of d: Redis's cron, and for a cluster its bus.
func idleCPU(ctx context.Context, single, cluster *redisTarget, d time.Duration) (string, error) {
	var both work
	if err := both.window(ctx, &redisTarget{masters: append(slices.Clone(single.masters), cluster.masters...)}, d); err != nil {
		return "", err
	}
	one := work{perOp: [][]float64{both.perOp[0][:len(single.masters)]}}
	many := work{perOp: [][]float64{both.perOp[0][len(single.masters):]}}
	return fmt.Sprintf("with no client (Redis's cron, the cluster bus): 1 server %.2f %%, %d masters %.2f %% (%s)",
		one.total()[0], clusterMasters, many.total()[0], many.split("%")), nil
}

// clusterRows are the rows of one workload: its rate against the single
// server's (the scaling factor), the Redis CPU per operation summed over
// the masters with each master's share, and the projected factor. For the
// steady state (steadyUnit), whose load is fixed, the first two
// are one row: the Redis CPU summed over the masters.
func clusterRows(name, unit, what string, single, cluster *work, caveat, idle string) []Row {
	fig := fmt.Sprintf("%s, %d masters vs 1 server", name, clusterMasters)
	so, sb := bench.Summarize(cluster.rate), bench.Summarize(single.rate)
	ct, st := bench.Summarize(cluster.total()), bench.Summarize(single.total())
	cmds := fmt.Sprintf("busiest commands (last run, Redis CPU): 1 server %s; %d masters %s", busiestCommands(single.last, 4), clusterMasters, busiestCommands(cluster.last, 4))
	proj := make([]float64, len(cluster.perOp))
	for r, b := range cluster.busiest() {
		proj[r] = st.Median / b
	}
	pr := Row{Figure: name + ": projected factor (1 server's Redis CPU / busiest master's)", Unit: "×", Ours: bench.Summarize(proj),
		Target: "≥ 2.5× (Redis-bound)", Note: "what the throughput factor would be with a core per master and Redis the bottleneck"}
	pr.Met = met(pr.Ours.Median >= 2.5)
	if unit == steadyUnit {
		return []Row{{Figure: fig + ", Redis CPU summed over the masters", Unit: "%", Ours: ct, Base: &st, BaseName: "1 server",
			Ratio: st.Median / ct.Median, Target: "reported", Note: fmt.Sprintf("%s; per master: %s; %s; %s", what, cluster.split("%"), idle, cmds)}, pr}
	}
	rate := Row{Figure: fig, Unit: unit, Ours: so, Base: &sb, BaseName: "1 server", Ratio: so.Median / sb.Median,
		Target: "≥ 2.5× (Redis-bound)", Met: "n/a (CPUs ≤ masters)",
		Note: what + "; baseline/ours here is cluster/single, the scaling factor; " + caveat}
	if runtime.NumCPU() > clusterMasters {
		rate.Met = met(rate.Ratio >= 2.5)
	}
	if len(cluster.acquired) > 0 {
		rate.Note += fmt.Sprintf("; leases acquired per session until all polled (1 = no churn): 1 server %.2f, %d masters %.2f; leases lost meanwhile: 1 server %.0f, %d masters %.0f",
			bench.Summarize(single.acquired).Median, clusterMasters, bench.Summarize(cluster.acquired).Median,
			bench.Summarize(single.lost).Median, clusterMasters, bench.Summarize(cluster.lost).Median)
	}
	perOp := Row{Figure: name + ": Redis CPU per operation, summed over the masters", Unit: "µs", Ours: ct, Base: &st, BaseName: "1 server",
		Ratio: st.Median / ct.Median, Target: "reported", Note: "per master: " + cluster.split("µs") + "; " + cmds}
	return []Row{rate, perOp, pr}
}

// clusterAcquire times one lease manager acquiring renewLeases leases in
// one call, on a fresh keyspace each run.
func clusterAcquire(ctx context.Context, e *env, tg *redisTarget, sz sizes) (*work, error) {
	w := &work{}
	for r := 0; r < sz.runs; r++ {
		if _, _, err := acquireAll(ctx, e, tg, sz.renewLeases, w); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// acquireAll resets tg and acquires n leases with one new manager, measured
// into w when w is not nil; the caller closes the client.
func acquireAll(ctx context.Context, e *env, tg *redisTarget, n int, w *work) (*lease.Manager, func() error, error) {
	if err := tg.reset(ctx, e); err != nil {
		return nil, nil, err
	}
	client := tg.client()
	m, err := lease.New(lease.Config{Client: client, Keys: e.keys, Holder: "acquirer", TTL: 5 * time.Minute})
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	ids := bench.SequentialIDs(n)
	acquire := func() (int, error) {
		for _, res := range m.Acquire(ctx, ids) {
			if res.Lease == nil {
				return 0, fmt.Errorf("acquire %s: not acquired (%v)", res.Session, res.Err)
			}
		}
		return n, nil
	}
	if w == nil {
		_, err = acquire()
	} else {
		err = w.measure(ctx, tg, 1e6, acquire)
	}
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return m, client.Close, nil
}

// clusterRenew times RenewAll of renewLeases leases, sz.runs times.
func clusterRenew(ctx context.Context, e *env, tg *redisTarget, sz sizes) (*work, error) {
	m, closeClient, err := acquireAll(ctx, e, tg, sz.renewLeases, nil)
	if err != nil {
		return nil, err
	}
	defer closeClient()
	w := &work{}
	for r := 0; r < sz.runs; r++ {
		err := w.measure(ctx, tg, 1e6, func() (int, error) {
			rep := m.RenewAll(ctx)
			if rep.Err != nil || rep.Renewed != sz.renewLeases {
				return 0, fmt.Errorf("renew: %d of %d renewed: %v", rep.Renewed, sz.renewLeases, rep.Err)
			}
			return rep.Renewed, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return w, nil
}

// clusterColdSize caps the cold start of the cluster scenario: it runs
// twice per run (single server and cluster), and 1M sessions would take
// minutes. At 200k over 20 workers on 2 loaded cores, the cluster's
// renewal cycles (a script call per lease there) passed their 5 s request
// timeout, leases were lost and taken again, and a run took 56-98 s.
func clusterColdSize(sz sizes) (sessions, workers int) {
	return min(sz.coldSessions, 100_000), min(sz.coldWorkers, 10)
}

// clusterCold seeds the sessions, starts the workers together and waits
// until every session was polled; the rate is sessions per second.
func clusterCold(ctx context.Context, e *env, tg *redisTarget, sz sizes) (*work, error) {
	n, workers := clusterColdSize(sz)
	w := &work{}
	for r := 0; r < sz.coldRuns; r++ {
		if err := tg.reset(ctx, e); err != nil {
			return nil, err
		}
		if err := bench.Seed(ctx, tg.admin, e.keys, bench.SequentialIDs(n), time.Hour); err != nil {
			return nil, err
		}
		rec := bench.NewRecorder()
		all := rec.WaitPolled(n)
		var fleet []*targetWorker
		var leases leaseCounts
		err := w.measure(ctx, tg, 1e6, func() (int, error) {
			for _, id := range workerIDs("w", workers) {
				tw, err := startTargetWorker(tg, e, id, defaultTimings(), 0, rec, &leases)
				if err != nil {
					return 0, err
				}
				fleet = append(fleet, tw)
			}
			if err := waitChan(ctx, all, sz.timeout, "every session polled"); err != nil {
				return 0, fmt.Errorf("%w (%d of %d polled)", err, rec.Polled(), n)
			}
			return n, nil
		})
		stopTargetWorkers(fleet)
		if err != nil {
			return nil, err
		}
		w.acquired = append(w.acquired, float64(leases.acquired.Load())/float64(n))
		w.lost = append(w.lost, float64(leases.lost.Load()))
	}
	return w, nil
}

// clusterSteady settles a fleet of steadySessions over steadyWorkers with
// the steady scenario's intervals and measures the masters' Redis CPU over
// windows of steadyWindow, in percent of one core: per master in perOp
// (one "operation" per window), summed in rate.
func clusterSteady(ctx context.Context, e *env, tg *redisTarget, sz sizes) (*work, error) {
	t := scaled(3 * sz.steadyInterval)
	grace := t.discovery / 4 // the post-change orphan watch lasts 3 × this
	if err := tg.reset(ctx, e); err != nil {
		return nil, err
	}
	if err := bench.Seed(ctx, tg.admin, e.keys, bench.SequentialIDs(sz.steadySessions), time.Hour); err != nil {
		return nil, err
	}
	rec := bench.NewRecorder()
	var fleet []*targetWorker
	defer func() { stopTargetWorkers(fleet) }()
	for _, id := range workerIDs("w", sz.steadyWorkers) {
		tw, err := startTargetWorker(tg, e, id, t, grace, rec, &leaseCounts{})
		if err != nil {
			return nil, err
		}
		fleet = append(fleet, tw)
	}
	if err := waitChan(ctx, rec.WaitPolled(sz.steadySessions), sz.timeout, "every session polled"); err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(3 * grace):
	}
	w := &work{}
	for range sz.runs {
		if err := w.window(ctx, tg, sz.steadyWindow); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// window measures the masters' Redis CPU over d, in percent of a core, as
// one operation: per master in perOp, summed in rate.
func (w *work) window(ctx context.Context, tg *redisTarget, d time.Duration) error {
	var el time.Duration
	err := w.measure(ctx, tg, 100, func() (int, error) {
		t0 := time.Now()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(d):
		}
		el = time.Since(t0)
		return 1, nil
	})
	if err != nil {
		return err
	}
	r := len(w.perOp) - 1
	w.rate[r] = 0
	for i := range w.perOp[r] {
		w.perOp[r][i] /= el.Seconds() // CPU seconds × 100 per second: percent
		w.rate[r] += w.perOp[r][i]
	}
	return nil
}

// leaseCounts counts the lease events of a fleet that show churn.
type leaseCounts struct{ acquired, lost atomic.Int64 }

// count is a lease event hook (poller.LeaseEvents).
func (c *leaseCounts) count(ev poller.Event) {
	switch ev.Type {
	case poller.EventAcquired:
		c.acquired.Add(1)
	case poller.EventLost:
		c.lost.Add(1)
	}
}

// targetWorker is one coordinator of the cluster scenario.
type targetWorker struct {
	cancel context.CancelFunc
	done   chan error
	client redis.UniversalClient
}

// startTargetWorker starts a coordinator named id on its own connection to
// tg; its polls go to rec. grace is its OrphanGrace (0: the default).
func startTargetWorker(tg *redisTarget, e *env, id string, t timings, grace time.Duration, rec *bench.Recorder, leases *leaseCounts) (*targetWorker, error) {
	client := tg.client()
	c, err := poller.New(poller.Config{Client: client, Keys: e.keys, ID: id,
		Poller: poller.PollFunc(func(_ context.Context, tn *poller.Turn) error {
			s := tn.Session()
			rec.Poll(s.ID, id)
			return nil
		}),
		LeaseTTL: t.ttl, RenewInterval: t.renew, HeartbeatInterval: t.heartbeat, DiscoveryInterval: t.discovery,
		OrphanGrace: grace, DrainTimeout: t.drain, Logger: e.logger, Observer: poller.LeaseEvents(leases.count)})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	tw := &targetWorker{cancel: cancel, done: make(chan error, 1), client: client}
	go func() { tw.done <- c.Run(ctx) }()
	return tw, nil
}

// stopTargetWorkers cancels every worker, then waits for each and closes
// its connection.
func stopTargetWorkers(ws []*targetWorker) {
	for _, w := range ws {
		w.cancel()
	}
	for _, w := range ws {
		<-w.done
		_ = w.client.Close()
	}
}
