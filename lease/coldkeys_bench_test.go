package lease

import (
	"context"
	"fmt"
	"testing"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/scripts/lua"
)

// BenchmarkScriptAcquireNewKeys1000 times acquire.lua taking 1000 leases
// of sessions never acquired before in each call, as a cold start does
// (every call adds 2000 keys: the keyspace grows, its tables rehash), on
// an empty server and on one already holding 3M keys (1M sessions' worth
// of definitions, leases and records), against BenchmarkScriptAcquire1000,
// which takes the same 1000 leases again and again.
func BenchmarkScriptAcquireNewKeys1000(b *testing.B) {
	for _, pre := range []int{0, 3_000_000} {
		b.Run(fmt.Sprintf("keys=%d", pre), func(b *testing.B) {
			srv := redistest.Start(b, "--enable-debug-command", "yes")
			rdb := srv.Client(b)
			ctx := context.Background()
			for i := 0; i < pre; i += 250_000 { // in parts: each within the client's read timeout
				if err := rdb.Do(ctx, "debug", "populate", 250_000, fmt.Sprintf("poll:sessions:x%d", i), 60).Err(); err != nil {
					b.Fatal(err)
				}
			}
			s := &scriptBench{rdb: rdb}
			const n = 1000
			owners := make([]any, n)
			for i := range owners {
				owners[i] = "bench-worker-0123456789#0123456789abcdef"
			}
			batch := 0
			args := func() []any {
				a := []any{2*n + 1}
				for i := range n {
					id := fmt.Sprintf("session-%07d", batch*n+i)
					a = append(a, realKeys.Lease(id), realKeys.Fencing(id))
				}
				batch++
				a = append(a, realKeys.Epoch(0), int64(30000), int64(0), "")
				return append(a, owners...)
			}
			s.ids = make([]string, n)
			s.runEach(b, lua.Acquire, args, replyLen(4*n))
		})
	}
}
