package lease

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/internal/redisstats"
	"github.com/pollworker/pollworker/internal/redistest"
)

// The benchmarks in this file run against a real redis-server started by
// internal/redistest, and are skipped when none is installed. Besides the
// usual figures they report the Redis CPU time (user + sys, from INFO cpu)
// spent per operation, so that client and server costs can be told apart:
//
//	go test -run '^$' -bench . -benchmem ./lease/
//	go test -run '^$' -bench RenewAll100k -benchtime 20x -cpuprofile /tmp/renew.prof ./lease/

// benchRedis starts a redis-server for a benchmark and returns a client to
// it; both are stopped when the benchmark ends. Without redis-server the
// benchmark is skipped at once, even under CI (benchmarks are not tests).
func benchRedis(b *testing.B) *redis.Client {
	b.Helper()
	if _, err := exec.LookPath(redistest.Binary); err != nil {
		b.Skip("redis-server not found on PATH")
	}
	srv := redistest.Start(b)
	return srv.Client(b)
}

// redisCPU is the CPU time the server has used so far (user + sys).
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	b.Helper()
	st, err := redisstats.Read(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return st.CPU()
}

// benchIDs returns n session ids shaped like real ones.
func benchIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("session-%07d", i)
	}
	return ids
}

// BenchmarkRenewAll100k times one renewal cycle of a Manager holding 100,000
// leases (the target: ≤ 200ms wall, one round trip per shard),
// split into 1 to 8 concurrent pipelines (the default is maxPipelines). It
// reports the Redis CPU time of a cycle as redis-ms/op.
func BenchmarkRenewAll100k(b *testing.B) { benchRenewAll(b, 100_000) }

// BenchmarkRenewAll10k is BenchmarkRenewAll100k with 10,000 leases.
func BenchmarkRenewAll10k(b *testing.B) { benchRenewAll(b, 10_000) }

func benchRenewAll(b *testing.B, n int) {
	rdb := benchRedis(b)
	ctx := context.Background()
	// The real clock: the fake one keeps its timers in a slice.
	m, err := New(Config{Client: rdb, Holder: "bench-worker-0123456789", TTL: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range m.Acquire(ctx, benchIDs(n)) {
		if r.Lease == nil {
			b.Fatalf("acquire %s: %v", r.Session, r.Err)
		}
	}
	defer func() {
		if err := m.ReleaseAll(ctx); err != nil {
			b.Fatal(err)
		}
	}()
	if rep := m.RenewAll(ctx); rep.Renewed != n { // loads the script
		b.Fatalf("renewed %d of %d: %v", rep.Renewed, n, rep.Err)
	}
	for _, p := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("pipelines=%d", p), func(b *testing.B) {
			m.maxPipelines = p
			b.ReportAllocs()
			cpu0 := redisCPU(b, rdb)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if rep := m.RenewAll(ctx); rep.Renewed != n {
					b.Fatalf("renewed %d of %d: %v", rep.Renewed, n, rep.Err)
				}
			}
			b.StopTimer()
			cpu := redisCPU(b, rdb) - cpu0 // includes the INFO call: negligible
			b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(b.N), "redis-ms/op")
		})
	}
}
