package lease

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/internal/redisstats"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/scripts/lua"
)

// BenchmarkScriptAcquireNewKeys1000 times acquire.lua taking 1000 leases
// of sessions never acquired before in each call, as a cold start does
// (the keyspace grows, its tables rehash), on an empty server and on one
// already holding 3M keys (1M sessions' worth of definitions and leases),
// in one run:
//   - records: the script before the token high-water mark
//     (testdata/acquire_records.lua), which writes every token into the
//     session's fencing record: two new keys per session;
//   - perowner: the script with one EXISTS per call, whose one EXISTS
//     finds no record, so no session is read: one command per session;
//     each session's owner value its own argument, as the Manager passed
//     them before owner values came in runs (testdata/acquire_perowner.lua);
//   - exists: today's, which takes the call's owner value once, as the
//     Manager passes it (one value per call: see appendOwnerRuns);
//   - setnx: the floor, a plain SET NX PX of each lease key, pipelined,
//     no script (what any lease on one key per session costs Redis).
//
// redis-cpu-µs/lease is the server's CPU per session (INFO used_cpu_*).
func BenchmarkScriptAcquireNewKeys1000(b *testing.B) {
	records, err := os.ReadFile("testdata/acquire_records.lua")
	if err != nil {
		b.Fatal(err)
	}
	perowner, err := os.ReadFile("testdata/acquire_perowner.lua")
	if err != nil {
		b.Fatal(err)
	}
	for _, pre := range []int{0, 3_000_000} {
		for _, variant := range []string{"records", "perowner", "exists", "setnx"} {
			b.Run(fmt.Sprintf("keys=%d/%s", pre, variant), func(b *testing.B) {
				srv := redistest.Start(b, "--enable-debug-command", "yes")
				rdb := srv.Client(b)
				ctx := context.Background()
				for i := 0; i < pre; i += 250_000 { // in parts: each within the client's read timeout
					if err := rdb.Do(ctx, "debug", "populate", 250_000, fmt.Sprintf("poll:sessions:x%d", i), 60).Err(); err != nil {
						b.Fatal(err)
					}
				}
				const n = 1000
				owners := make([]any, n) // one value per session, as the Manager made them before runs
				for i := range owners {
					owners[i] = fmt.Sprintf("bench-worker-0123456789#0123456789abc%03d", i)
				}
				batch := 0
				ids := func() []string {
					out := make([]string, n)
					for i := range out {
						out[i] = fmt.Sprintf("session-%07d", batch*n+i)
					}
					batch++
					return out
				}
				if variant == "setnx" {
					benchSetNX(b, rdb, ids, owners)
					return
				}
				args := func() []any {
					a := []any{2*n + 2}
					for _, id := range ids() {
						a = append(a, realKeys.Lease(id), realKeys.Fencing(id))
					}
					a = append(a, realKeys.Epoch(0), realKeys.EpochTokens(0), int64(30000), int64(0), "")
					if variant == "exists" { // the call's one owner value, for all n sessions
						return append(a, fmt.Sprintf("bench-worker-0123456789#0123456789abc%03d", batch), n)
					}
					return append(a, owners...)
				}
				src := lua.Acquire
				switch variant {
				case "records":
					src = string(records) // reads 2n+1 keys: the high-water key is an extra one it ignores
				case "perowner":
					src = string(perowner)
				}
				s := &scriptBench{rdb: rdb, ids: make([]string, n)}
				s.runEach(b, src, args, replyLen(4*n))
			})
		}
	}
}

// benchSetNX times pipelines of plain SET NX PX, one per lease key of the
// sessions ids returns, and reports the server CPU per lease as runEach.
func benchSetNX(b *testing.B, rdb *redis.Client, ids func() []string, owners []any) {
	ctx := context.Background()
	var cpu float64
	n := len(owners)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		pipe := rdb.Pipeline()
		for j, id := range ids() {
			pipe.SetNX(ctx, realKeys.Lease(id), owners[j], 30*time.Second)
		}
		st, err := redisstats.Read(ctx, rdb)
		if err != nil {
			b.Fatal(err)
		}
		cpu -= st.CPUSeconds
		b.StartTimer()
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if st, err = redisstats.Read(ctx, rdb); err != nil {
			b.Fatal(err)
		}
		cpu += st.CPUSeconds
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/lease")
	b.ReportMetric(cpu*1e6/float64(b.N*n), "redis-cpu-µs/lease")
}
