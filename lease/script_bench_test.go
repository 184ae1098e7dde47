package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/internal/redisstats"
	"github.com/pollworker/pollworker/scripts/lua"
)

// Benchmarks of each Lua script alone: one EVALSHA over 500 sessions (the
// default BatchSize) per op, the command line built before the timer runs,
// against a real redis-server (skipped without one):
//
//	go test -run '^$' -bench Script -benchmem ./lease/
//
// Besides ns/op (client round trip of one call) they report ns/lease and
// redis-µs/call, the server time of one call from INFO commandstats: the
// time one call keeps Redis from serving anything else (target ≤ 3 ms).

const scriptBatch = 500

// scriptBench is one redis-server with 500 sessions' keys and owner values.
type scriptBench struct {
	rdb    *redis.Client
	ids    []string
	owners []string
	keys   []string // lease keys
}

func newScriptBench(b *testing.B) *scriptBench {
	b.Helper()
	s := &scriptBench{rdb: benchRedis(b), ids: benchIDs(scriptBatch)}
	for _, id := range s.ids {
		s.owners = append(s.owners, "bench-worker-0123456789#0123456789abcdef")
		s.keys = append(s.keys, realKeys.Lease(id))
	}
	return s
}

// hold sets every lease key to its owner value, with a TTL.
func (s *scriptBench) hold(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	pipe := s.rdb.Pipeline()
	for i, k := range s.keys {
		pipe.Set(ctx, k, s.owners[i], time.Minute)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
}

// free deletes the lease keys (and, if marks, the handoff marks), plainly.
func (s *scriptBench) free(b *testing.B, marks bool) {
	b.Helper()
	ks := append([]string(nil), s.keys...)
	if marks {
		for _, id := range s.ids {
			ks = append(ks, realKeys.Released(id))
		}
	}
	if err := s.rdb.Del(context.Background(), ks...).Err(); err != nil {
		b.Fatal(err)
	}
}

// mark sets every session's handoff mark, as release.lua would.
func (s *scriptBench) mark(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	now := s.rdb.Time(ctx).Val().UnixMilli()
	pipe := s.rdb.Pipeline()
	for _, id := range s.ids {
		pipe.Set(ctx, realKeys.Released(id), now, time.Minute)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
}

// run times script over args, calling before (untimed) ahead of each call,
// and reports ns/lease and redis-µs/call. check validates one reply.
func (s *scriptBench) run(b *testing.B, src string, args []any, before func(), check func(*redis.Cmd) error) {
	b.Helper()
	ctx := context.Background()
	script := redis.NewScript(src)
	if err := script.Load(ctx, s.rdb).Err(); err != nil {
		b.Fatal(err)
	}
	line := append([]any{"evalsha", script.Hash()}, args...)
	if err := s.rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if before != nil {
			b.StopTimer()
			before()
			b.StartTimer()
		}
		cmd := s.rdb.Do(ctx, line...)
		if err := cmd.Err(); err != nil {
			b.Fatal(err)
		}
		if err := check(cmd); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	calls, usec := evalshaStats(b, s.rdb)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*scriptBatch), "ns/lease")
	if calls > 0 {
		b.ReportMetric(float64(usec)/float64(calls), "redis-µs/call")
	}
}

// evalshaStats returns how many EVALSHA calls Redis has run since the last
// CONFIG RESETSTAT and the microseconds they took (INFO commandstats).
func evalshaStats(b *testing.B, c *redis.Client) (calls, usec int64) {
	b.Helper()
	st, err := redisstats.Read(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return st.Commands["evalsha"].Calls, st.Commands["evalsha"].Usec
}

// replyLen checks that a reply is an array of n values.
func replyLen(n int) func(*redis.Cmd) error {
	return func(cmd *redis.Cmd) error {
		vals, err := cmd.Slice()
		if err != nil {
			return err
		}
		if len(vals) != n {
			return fmt.Errorf("reply of %d values, want %d", len(vals), n)
		}
		return nil
	}
}

// BenchmarkScriptAcquire500 times acquire.lua taking 500 free leases:
// fresh (no handoff mark) and after a graceful release (each mark read,
// deleted and turned into a gap).
func BenchmarkScriptAcquire500(b *testing.B) {
	s := newScriptBench(b)
	args := []any{3 * scriptBatch}
	for _, id := range s.ids {
		args = append(args, realKeys.Lease(id), realKeys.Fence(id), realKeys.Released(id))
	}
	args = append(args, int64(30000))
	for _, o := range s.owners {
		args = append(args, o)
	}
	b.Run("fresh", func(b *testing.B) {
		s.run(b, lua.Acquire, args, func() { s.free(b, true) }, replyLen(4*scriptBatch))
	})
	b.Run("handoff", func(b *testing.B) {
		s.run(b, lua.Acquire, args, func() { s.free(b, true); s.mark(b) }, replyLen(4*scriptBatch))
	})
}

// BenchmarkScriptRenew500 times renew.lua extending 500 leases this owner
// holds (the steady state of a renewal cycle).
func BenchmarkScriptRenew500(b *testing.B) {
	s := newScriptBench(b)
	s.hold(b)
	args := []any{scriptBatch}
	for _, k := range s.keys {
		args = append(args, k)
	}
	args = append(args, int64(30000))
	for _, o := range s.owners {
		args = append(args, o)
	}
	s.run(b, lua.Renew, args, nil, replyLen(0))
}

// BenchmarkScriptRelease500 times release.lua deleting 500 leases this
// owner holds and leaving their handoff marks.
func BenchmarkScriptRelease500(b *testing.B) {
	s := newScriptBench(b)
	args := []any{2 * scriptBatch}
	for _, id := range s.ids {
		args = append(args, realKeys.Lease(id), realKeys.Released(id))
	}
	args = append(args, int64(30000))
	for _, o := range s.owners {
		args = append(args, o)
	}
	s.run(b, lua.Release, args, func() { s.hold(b) }, replyLen(scriptBatch))
}

// BenchmarkScriptLeaseRead500 times the two read-only scripts over the
// same 500 held leases: inspect.lua (owner, PTTL and key problems of each) and
// unheld.lua (which are free: the orphan watch of a steady fleet, nothing
// free, an empty reply).
func BenchmarkScriptLeaseRead500(b *testing.B) {
	s := newScriptBench(b)
	s.hold(b)
	args := []any{3 * scriptBatch}
	for _, id := range s.ids {
		args = append(args, realKeys.Lease(id), realKeys.Fence(id), realKeys.Released(id))
	}
	b.Run("inspect", func(b *testing.B) { s.run(b, lua.Inspect, args, nil, replyLen(3*scriptBatch)) })
	args = []any{scriptBatch}
	for _, k := range s.keys {
		args = append(args, k)
	}
	b.Run("unheld", func(b *testing.B) { s.run(b, lua.Unheld, args, nil, replyLen(0)) })
}
