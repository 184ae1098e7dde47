package httppoll

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pollworker/pollworker/internal/redisstats"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/results"
)

// BenchmarkRecord measures what recording costs Redis per poll, against a
// real redis-server: round trips per poll (pipelines and single commands),
// XADDs per poll, and Redis CPU per poll (used_cpu_sys + used_cpu_user).
// 1,000 sessions are polled in turn; 1% of the polls answer 503 instead of
// 200 (for "changes"). Cases:
//
//   - sync: one XADD per poll (Config.Client, no results.Recorder), the old way;
//   - all/batch=N: a results.Recorder flushing N results per pipeline (at the
//     default 100ms FlushInterval, N = 50 is a worker doing 500 polls/s;
//     N = 500, BatchSize, is 5,000 polls/s and more);
//   - changes/batch=50: results.RecordChanges;
//   - xadd-pipelined: the limit, bare XADDs 1,000 per pipeline.
//
// Run: go test -run '^$' -bench BenchmarkRecord -benchtime 200000x ./httppoll
func BenchmarkRecord(b *testing.B) {
	srv := redistest.Start(b)
	sessions := make([]string, 1000)
	for i := range sessions {
		sessions[i] = "s" + strconv.Itoa(i)
	}
	poll := func(i int) results.Result {
		// A session's first poll is a change (Result.Changed).
		r := results.Result{Session: sessions[i%len(sessions)], Worker: "w1", Token: 7, Status: 200,
			Latency: 1200 * time.Microsecond, At: time.UnixMilli(1_700_000_000_000 + int64(i)), Changed: i < len(sessions)}
		if i%101 == 100 { // a different session each time
			r.Status, r.Error, r.Changed = 503, "httppoll: server error: 503 Service Unavailable", true
		}
		return r
	}
	cases := []struct {
		name  string
		mode  results.RecordMode
		batch int // 0: synchronous
		bare  bool
	}{
		{name: "sync", mode: results.RecordAll},
		{name: "all/batch=50", mode: results.RecordAll, batch: 50},
		{name: "all/batch=500", mode: results.RecordAll, batch: 500},
		{name: "changes/batch=50", mode: results.RecordChanges, batch: 50},
		{name: "xadd-pipelined", batch: 1000, bare: true},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			c := srv.Client(b)
			require.NoError(b, c.FlushAll(ctx).Err())
			count := &redistest.RoundTrips{}
			c.AddHook(count)
			// The fake clock never ticks: the Recorder flushes when a batch
			// waits, and at the end.
			rec, err := results.NewRecorder(results.RecorderConfig{Client: c, BatchSize: max(bc.batch, 1),
				QueueSize: max(b.N, 1), MaxLen: 100_000, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
			require.NoError(b, err)
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- rec.Run(rctx) }()
			cfg := Config{Client: c, Worker: "w1", Record: bc.mode, StreamMaxLen: 100_000}
			if bc.batch > 0 {
				cfg.Recorder = rec
			}
			p, err := New(cfg)
			require.NoError(b, err)
			var batch []results.Result
			before, err := redisstats.Read(ctx, c)
			require.NoError(b, err)
			rt0 := count.Pipelines.Load() + count.Commands.Load()

			b.ResetTimer()
			for i := range b.N {
				res := poll(i)
				if bc.bare {
					batch = append(batch, res)
					if len(batch) == bc.batch {
						_, err := results.Write(ctx, c, keys, false, 100_000, batch)
						require.NoError(b, err)
						batch = batch[:0]
					}
					continue
				}
				p.record(ctx, res)
			}
			if bc.bare {
				_, err = results.Write(ctx, c, keys, false, 100_000, batch)
				require.NoError(b, err)
			}
			stop()
			require.NoError(b, <-done)
			b.StopTimer()

			rt := count.Pipelines.Load() + count.Commands.Load() - rt0
			after, err := redisstats.Read(ctx, c)
			require.NoError(b, err)
			d := after.Delta(before)
			n := float64(b.N)
			b.ReportMetric(float64(rt)/n, "roundtrips/poll")
			b.ReportMetric(float64(d.Commands["xadd"].Calls)/n, "xadd/poll")
			b.ReportMetric(d.CPUSeconds*1e6/n, "redis-µs/poll")
			b.ReportMetric(float64(d.Commands["xadd"].Usec)/n, "xadd-µs/poll")
			require.Zero(b, rec.Stats().Dropped)
		})
	}
}
