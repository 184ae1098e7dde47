package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/pollworker/pollworker/assign"
	"github.com/pollworker/pollworker/bench"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/poller"
	"github.com/pollworker/pollworker/session"
)

// loadSizes are the knobs of the load scenario, by mode: sessions, workers
// of the planner comparison, and the sessions of the fleet run.
func loadSizes(mode string) (sessions, workers, fleetSessions, fleetWorkers int) {
	switch mode {
	case "full":
		return 100_000, 10, 20_000, 5
	case "quick":
		return 20_000, 10, 5_000, 5
	}
	return 2_000, 4, 400, 3
}

// runLoad measures load-aware balance (issue 14 item 5): sessions with
// intervals log-uniform between 1 s and 1 h are written through
// session.Store (so the writers keep the bucket loads), and the plan the
// workers compute from the loads they read back (ours) is compared with
// the plan by session counts (what the workers did before), on the same
// sessions and workers: max/mean polls per second per worker, each
// worker's rate over its weight. Then a fleet of coordinators (one of
// weight 2) takes the sessions, and the same figure is read from the
// leases they hold.
func runLoad(ctx context.Context, e *env, sz sizes) ([]Row, error) {
	n, w, fn, fw := loadSizes(sz.mode)
	var rows []Row
	for _, count := range []int{n, n / 10} {
		r, err := loadPlans(ctx, e, sz, count, w)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	var fleet []float64
	for r := range min(sz.runs, 2) {
		rng := rand.New(rand.NewPCG(uint64(r), 15))
		b, err := fleetBalance(ctx, e, sz, rng, fn, fw, r)
		if err != nil {
			return nil, err
		}
		fleet = append(fleet, b)
	}
	sf := bench.Summarize(fleet)
	rows = append(rows, Row{Figure: fmt.Sprintf("max/mean polls per second per unit of weight held by a fleet of %d coordinators (one --weight 2), %d sessions", fw, fn),
		Target: "≤ 1.05", Ours: sf, Met: met(sf.Max <= 1.05),
		Note: fmt.Sprintf("in-process poller.Coordinators on the real redis-server, %d runs; the rate of the sessions whose leases each holds once every session is held and the holdings stay put for a discovery interval and a lease TTL; exact: %s", len(fleet), exact(fleet))})
	return rows, nil
}

// loadPlans compares the plans by load and by count for n sessions on w
// workers (equal, then the first of weight 2), over sz.runs sets of
// sessions.
func loadPlans(ctx context.Context, e *env, sz sizes, n, w int) ([]Row, error) {
	var ours, counts, oursW, countsW, heavy []float64
	for r := range sz.runs {
		if err := e.reset(ctx); err != nil {
			return nil, err
		}
		rng := rand.New(rand.NewPCG(uint64(r), 14))
		sessions := logUniformSessions(rng, n, fmt.Sprintf("r%d-", r))
		store, err := session.NewStore(e.admin, e.keys)
		if err != nil {
			return nil, err
		}
		if err := putAll(ctx, store, sessions); err != nil {
			return nil, err
		}
		wt, err := store.Weights(ctx)
		if err != nil {
			return nil, err
		}
		if !wt.Complete {
			return nil, fmt.Errorf("the loads of a new index are not complete")
		}
		rate := bucketRates(sessions)
		equal := make([]assign.Member, w)
		weighted := make([]assign.Member, w)
		for i := range w {
			equal[i] = assign.Member{ID: fmt.Sprintf("w%d", i), Weight: 1}
			weighted[i] = assign.Member{ID: fmt.Sprintf("w%d", i), Weight: 1}
		}
		weighted[0].Weight = 2
		for _, c := range []struct {
			members   []assign.Member
			ours, cnt *[]float64
		}{{equal, &ours, &counts}, {weighted, &oursW, &countsW}} {
			f, err := assign.NewFleet(c.members...)
			if err != nil {
				return nil, err
			}
			*c.ours = append(*c.ours, planBalance(f.Plan(wt.Loads, poller.DefaultBalanceSlack), c.members, rate))
			*c.cnt = append(*c.cnt, planBalance(f.Plan(wt.Sizes, poller.DefaultBalanceSlack), c.members, rate))
		}
		heavy = append(heavy, slices.Max(rate)/(sum(rate)/float64(w)))
	}
	so, sc, sow, scw := bench.Summarize(ours), bench.Summarize(counts), bench.Summarize(oursW), bench.Summarize(countsW)
	note := fmt.Sprintf("%d sessions, intervals log-uniform from 1 s to 1 h (mean %.3f polls/s per session), written with session.Store.PutMany; planned on %d workers with the default balance slack %.2f from the loads the writers kept (polls per day per bucket, read back with Store.Weights); the baseline is the same planner fed the session counts (the sizes hash), as the workers planned before; exact per run: ours %s, count balance %s",
		n, 1/math.Log(3600)*(1-1.0/3600), w, poller.DefaultBalanceSlack, exact(ours), exact(counts))
	return []Row{
		{Figure: fmt.Sprintf("max/mean polls per second per worker, %d sessions, %d equal workers", n, w), Target: "≤ 1.05",
			Ours: so, Base: &sc, BaseName: "count balance", Ratio: sc.Median / so.Median, Met: met(so.Max <= 1.05), Note: note},
		{Figure: fmt.Sprintf("max/mean polls per second per unit of weight, %d sessions, %d workers, one of weight 2", n, w), Target: "≤ 1.05",
			Ours: sow, Base: &scw, BaseName: "count balance", Ratio: scw.Median / sow.Median, Met: met(sow.Max <= 1.05),
			Note: fmt.Sprintf("each worker's rate over its --weight; the bound is its weight's share × 1.05; exact per run: ours %s, count balance %s", exact(oursW), exact(countsW))},
		{Figure: fmt.Sprintf("heaviest bucket / mean worker rate, %d sessions (bucket granularity)", n), Ours: bench.Summarize(heavy),
			Note: "a bucket is never split: the bound can be met only while this stays well below the slack"},
	}, nil
}

// exact formats figures to 4 decimals.
func exact(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.4f", x)
	}
	return strings.Join(parts, " ")
}

// logUniformSessions returns n sessions with intervals log-uniform from 1 s
// to 1 h (to the millisecond).
func logUniformSessions(rng *rand.Rand, n int, prefix string) []session.Session {
	out := make([]session.Session, n)
	lo, hi := math.Log(1), math.Log(3600)
	for i := range out {
		sec := math.Exp(lo + rng.Float64()*(hi-lo))
		d := time.Duration(sec * float64(time.Second)).Round(time.Millisecond)
		out[i] = session.Session{ID: fmt.Sprintf("%s%d", prefix, i), URL: "http://127.0.0.1:1/x", Interval: session.Duration(d)}
	}
	return out
}

// putAll writes sessions in chunks of 5000.
func putAll(ctx context.Context, store *session.Store, sessions []session.Session) error {
	for chunk := range slices.Chunk(sessions, 5000) {
		if err := store.PutMany(ctx, chunk); err != nil {
			return err
		}
	}
	return nil
}

// bucketRates is the poll rate (polls per second) of each bucket.
func bucketRates(sessions []session.Session) []float64 {
	rate := make([]float64, keyspace.SessionBuckets)
	for _, s := range sessions {
		rate[keyspace.BucketOf(s.ID)] += float64(time.Second) / float64(s.Interval.D())
	}
	return rate
}

// planBalance is max/mean of each member's poll rate over its weight under
// plan p.
func planBalance(p *assign.Plan, members []assign.Member, rate []float64) float64 {
	per := map[string]float64{}
	for b, r := range rate {
		per[p.Owner(b)] += r
	}
	return weightedMaxOverMean(per, members)
}

// weightedMaxOverMean is max over mean of rate/weight.
func weightedMaxOverMean(per map[string]float64, members []assign.Member) float64 {
	var total, weight, worst float64
	for _, m := range members {
		total += per[m.ID]
		weight += m.Weight
		worst = max(worst, per[m.ID]/m.Weight)
	}
	return worst / (total / weight)
}

func sum(xs []float64) float64 {
	t := 0.0
	for _, x := range xs {
		t += x
	}
	return t
}

// fleetBalance runs fw coordinators (the first of weight 2) over fn
// log-uniform sessions until every session is held, and returns max/mean
// of the held poll rate per unit of weight.
func fleetBalance(ctx context.Context, e *env, sz sizes, rng *rand.Rand, fn, fw, r int) (float64, error) {
	if err := e.reset(ctx); err != nil {
		return 0, err
	}
	sessions := logUniformSessions(rng, fn, fmt.Sprintf("f%d-", r))
	store, err := session.NewStore(e.admin, e.keys)
	if err != nil {
		return 0, err
	}
	if err := putAll(ctx, store, sessions); err != nil {
		return 0, err
	}
	interval := make(map[string]time.Duration, fn)
	for _, s := range sessions {
		interval[s.ID] = s.Interval.D()
	}
	t := scaled(3 * time.Second)
	rec := bench.NewRecorder()
	members := make([]assign.Member, fw)
	ms := make([]*member, 0, fw)
	defer func() { stopAll(ms) }()
	for i, id := range workerIDs("load", fw) {
		members[i] = assign.Member{ID: id, Weight: 1}
		if i == 0 {
			members[i].Weight = 2
		}
		m, err := e.startWeighted(id, "", members[i].Weight, t, rec)
		if err != nil {
			return 0, err
		}
		ms = append(ms, m)
	}
	total := func() int {
		c := 0
		for _, m := range ms {
			c += m.count()
		}
		return c
	}
	if err := waitFor(ctx, sz.timeout, fmt.Sprintf("%d leases held", fn), func() bool { return total() == fn }); err != nil {
		return 0, err
	}
	// Every session is held; let the fleet settle (moves off orphan
	// adopters, held-back sessions) until the holdings stay put for a
	// discovery interval.
	last, since := holdings(ms), time.Now()
	if err := waitFor(ctx, sz.timeout, "holdings settled", func() bool {
		now := holdings(ms)
		if !slices.Equal(now, last) || total() != fn {
			last, since = now, time.Now()
			return false
		}
		return time.Since(since) >= t.discovery+t.ttl
	}); err != nil {
		return 0, err
	}
	per := map[string]float64{}
	for _, m := range ms {
		for _, id := range m.held() {
			per[m.id] += float64(time.Second) / float64(interval[id])
		}
	}
	return weightedMaxOverMean(per, members), nil
}

// holdings is the number of leases each member holds.
func holdings(ms []*member) []int {
	out := make([]int, len(ms))
	for i, m := range ms {
		out[i] = m.count()
	}
	return out
}
