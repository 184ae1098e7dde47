package poller

import (
	"runtime"
	"runtime/metrics"
	"time"
)

// A worker whose CPU is the bound (polls due faster than the process can
// run them) used to start every due poll up to Config.MaxPolls (1024) at
// once. Those polls then queued in the Go runtime and the kernel rather
// than in the scheduler's heap, which is ordered by due time: a poll's
// start was delayed by however the runtime happened to run 1,000
// goroutines, the polls took 10-100× longer than alone, and the process
// achieved about half of what it does with a few dozen polls running
// (pollbench -only overload, CPU-bound: 7.2k polls/s with 1024 at once
// against 14.8k with 32, and the longest gap of a session at p99 2.5×
// the median against 1.16×).
//
// cpuLimit halves the number of polls running at once while the process
// has more runnable goroutines than processors and they wait to run
// (cpuSample.busy), and raises it back, step by step, once polls wait
// for it and the CPU has room: due polls beyond it wait in the
// scheduler's heap for their fair turn, so that an overloaded worker
// slows every session alike and says why (BehindCPU). It never goes
// above Config.MaxPolls nor below cpuLimitFloor; it is off when MaxPolls
// is off. It is the same idea as TCP's AIMD and Netflix's
// concurrency-limits, driven by the runtime's own run queue rather than
// by poll latency: a slow target makes polls long, not the process busy,
// so it never lowers the limit.
type cpuLimit struct {
	max, floor int       // the bounds: Config.MaxPolls and cpuLimitFloor
	cur        int       // polls that may run at once now
	stepAt     time.Time // the next step (every cpuLimitPeriod)
	waited     bool      // a poll waited for cur since the last step
	busy       bool      // the last step found the CPU busy
}

const (
	// cpuLimitPeriod is how often the limit is adjusted: from 1024 to
	// the floor in under 2 s.
	cpuLimitPeriod = 250 * time.Millisecond
	// busyLatency is the scheduling latency (p90 over a period) from
	// which runnable goroutines count as waiting for a processor.
	busyLatency = time.Millisecond
	// busyRunnable is how many runnable goroutines per processor make
	// the process busy (with busyLatency).
	busyRunnable = 2
)

// cpuLimitFloor is the lowest the limit goes with procs processors:
// enough polls at once to keep the processors fed while some wait on the
// network or on a CPU quota's throttling (a worker held to 0.3 CPUs by a
// cgroup quota ran about a third fewer polls with 16 at once than with
// 64, and its sessions' longest gaps went over the fair bound).
func cpuLimitFloor(procs int) int { return max(64, 8*procs) }

// newCPULimit returns the limit for Config.MaxPolls max (≤ 0: off) on
// procs processors, starting at max.
func newCPULimit(max, procs int) cpuLimit {
	return cpuLimit{max: max, floor: min(max, cpuLimitFloor(procs)), cur: max}
}

// limit returns how many polls may run at once now (≤ 0: no limit).
func (c *cpuLimit) limit() int { return c.cur }

// lowered reports whether the limit is below Config.MaxPolls.
func (c *cpuLimit) lowered() bool { return c.cur < c.max }

// cpuBound reports whether a poll that waits for the limit now waits for
// the CPU: the limit is lowered for it, or the last step found the CPU
// busy (MaxPolls reached while the CPU is busy, before the limit falls).
func (c *cpuLimit) cpuBound() bool { return c.lowered() || c.busy }

// due reports whether a step is due at now.
func (c *cpuLimit) due(now time.Time) bool { return c.max > 0 && !now.Before(c.stepAt) }

// step adjusts the limit from a sample of the CPU, the polls running now
// and whether polls wait for it now, and reports whether it rose (polls
// waiting may start): while the CPU is busy, to half of what runs (at
// least floor); else, if polls waited for it since the last step or wait
// now, by a quarter (at least 1), up to max.
func (c *cpuLimit) step(now time.Time, s cpuSample, active int, waiting bool) (rose bool) {
	c.stepAt = now.Add(cpuLimitPeriod)
	waited := c.waited || waiting
	c.waited = false
	c.busy = s.busy()
	switch {
	case c.busy:
		c.cur = max(c.floor, min(c.cur, active)/2)
	case waited && c.cur < c.max:
		c.cur = min(c.max, c.cur+max(1, c.cur/4))
		return true
	}
	return false
}

// cpuSample is what the Go runtime says of the process's CPU.
type cpuSample struct {
	procs    int           // GOMAXPROCS
	runnable int           // goroutines ready to run, waiting for a processor, now
	latency  time.Duration // p90 of how long goroutines waited to run, since the previous sample
}

// busy reports whether the process runs more than its processors can:
// goroutines queue for them (busyRunnable per processor) and wait
// (busyLatency). A process descheduled by a busy machine shows latency
// without its own run queue, and is not busy.
func (s cpuSample) busy() bool {
	return s.procs > 0 && s.runnable >= busyRunnable*s.procs && s.latency >= busyLatency
}

// runtimeCPU samples the Go runtime's scheduler metrics (runtime/metrics).
// Not safe for concurrent use.
type runtimeCPU struct {
	samples []metrics.Sample
	prev    []uint64 // the latency histogram's counts at the previous sample
}

const (
	metricRunnable  = "/sched/goroutines/runnable:goroutines"
	metricLatencies = "/sched/latencies:seconds"
)

// newRuntimeCPU returns a sampler, or nil when the runtime does not
// export the metrics it reads.
func newRuntimeCPU() *runtimeCPU {
	r := &runtimeCPU{samples: []metrics.Sample{{Name: metricRunnable}, {Name: metricLatencies}}}
	metrics.Read(r.samples)
	if r.samples[0].Value.Kind() != metrics.KindUint64 || r.samples[1].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	r.prev = append(r.prev, r.samples[1].Value.Float64Histogram().Counts...)
	return r
}

// sample reads the metrics now.
func (r *runtimeCPU) sample() cpuSample {
	metrics.Read(r.samples)
	h := r.samples[1].Value.Float64Histogram()
	s := cpuSample{procs: runtime.GOMAXPROCS(0), runnable: int(r.samples[0].Value.Uint64())}
	s.latency = latencyQuantile(h.Counts, r.prev, h.Buckets, 0.9)
	r.prev = append(r.prev[:0], h.Counts...)
	return s
}

// latencyQuantile returns the q quantile of the observations a histogram
// gained between two reads of it (counts now, prev before; buckets are
// its boundaries in seconds), as the lower bound of the bucket it falls
// in; 0 with no observation.
func latencyQuantile(counts, prev []uint64, buckets []float64, q float64) time.Duration {
	var total uint64
	for i, n := range counts {
		if i < len(prev) {
			n -= prev[i]
		}
		total += n
	}
	if total == 0 {
		return 0
	}
	want := uint64(q * float64(total))
	var seen uint64
	for i, n := range counts {
		if i < len(prev) {
			n -= prev[i]
		}
		if seen += n; seen > want {
			lo := buckets[i]
			if lo < 0 { // the first bucket starts at -Inf
				lo = 0
			}
			return time.Duration(lo * float64(time.Second))
		}
	}
	return 0
}
