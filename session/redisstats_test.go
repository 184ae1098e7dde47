package session

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/internal/redisstats"
)

// readServerCost reads what a redis-server says it has spent so far.
func readServerCost(tb testing.TB, c redis.Cmdable) redisstats.Stats {
	tb.Helper()
	st, err := redisstats.Read(context.Background(), c)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// reportServerCost reports the server's CPU and command time since before,
// per key read (n keys), as redis-cpu-ns/key and redis-cmd-ns/key. The
// commands a script calls are counted within its EVALSHA, so when there is
// one only EVAL and EVALSHA are summed; INFO is left out.
func reportServerCost(b *testing.B, c redis.Cmdable, before redisstats.Stats, n int) {
	b.Helper()
	after := readServerCost(b, c)
	delta := func(cmd string) int64 { return after.Commands[cmd].Usec - before.Commands[cmd].Usec }
	var usec int64
	if scripts := delta("evalsha") + delta("eval"); scripts > 0 {
		usec = scripts
	} else {
		for cmd := range after.Commands {
			if cmd != "info" {
				usec += delta(cmd)
			}
		}
	}
	b.ReportMetric(float64((after.CPU()-before.CPU()).Nanoseconds())/float64(n), "redis-cpu-ns/key")
	b.ReportMetric(float64(usec*1000)/float64(n), "redis-cmd-ns/key")
}
