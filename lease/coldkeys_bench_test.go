package lease

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/internal/redisstats"
	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/scripts/lua"
)

// BenchmarkScriptAcquireNewKeys1000 times the acquisition of 1000 leases
// of sessions never acquired before in each call, as a cold start does
// (the keyspace grows, its tables rehash), on an empty server and on one
// already holding 3M keys (1M sessions' worth of definitions and leases).
// The variants run side by side, each on its own server, one call of each
// in turn, so that their figures come from the same minutes of this
// shared machine (run one after the other, they moved by more than their
// differences):
//   - records: the script before the token high-water mark
//     (testdata/acquire_records.lua), which writes every token into the
//     session's fencing record: two new keys per session;
//   - perowner: the script with one EXISTS per call, whose one EXISTS
//     finds no record, so no session is read: one command per session;
//     each session's owner value its own argument, as the Manager passed
//     them before owner values came in runs (testdata/acquire_perowner.lua);
//   - exists: today's, which takes the call's owner value once, as the
//     Manager passes it (one value per call: see appendOwnerRuns);
//   - luafloor: a script that only does SET NX PX of each lease key with
//     the call's owner value, with acquire.lua's keys and arguments
//     (testdata/acquire_floor.lua): what any acquisition by script costs;
//   - setnx: a plain SET NX PX of each lease key, pipelined, no script
//     (what any lease on one key per session costs Redis);
//   - multi: the cold path as a transaction instead of one script: a
//     script reads the loss marker and the high-water mark and tells by
//     one EXISTS over every lease and record key that no session has
//     either (testdata/acquire_reserve.lua); then WATCH of the marker and
//     the mark, and MULTI, SET NX PX of each lease, SET of the mark, EXEC.
//     Not safe as written (a yardstick: the script's read must come after
//     the WATCH, and a release between the two could leave a handoff
//     mark unread); watching every lease and record key as well, which
//     would close that, cost Redis about 50 µs per lease here.
//
// <variant>-redis-cpu-µs/lease is the server's CPU per session (INFO
// used_cpu_*: reading requests and writing replies included),
// <variant>-cmdstat-µs/lease the time INFO commandstats gives the calls'
// commands (the scripts, or for setnx and multi the commands sent; what
// runs inside a script is in the script's time), ns/op the time of one
// call of every variant.
func BenchmarkScriptAcquireNewKeys1000(b *testing.B) {
	read := func(name string) string {
		src, err := os.ReadFile("testdata/" + name)
		if err != nil {
			b.Fatal(err)
		}
		return string(src)
	}
	variants := []struct{ name, src string }{
		{"records", read("acquire_records.lua")}, {"perowner", read("acquire_perowner.lua")},
		{"exists", lua.Acquire}, {"luafloor", read("acquire_floor.lua")}, {"setnx", ""},
		{"multi", read("acquire_reserve.lua")},
	}
	const n = 1000
	for _, pre := range []int{0, 3_000_000} {
		b.Run(fmt.Sprintf("keys=%d", pre), func(b *testing.B) {
			ctx := context.Background()
			type server struct {
				rdb    *redis.Client
				script *redis.Script
				cpu    float64 // Redis CPU seconds in the calls
				cmd    float64 // µs INFO commandstats gives the calls' top-level commands
			}
			servers := make([]*server, len(variants))
			for v, variant := range variants {
				srv := redistest.Start(b, "--enable-debug-command", "yes")
				s := &server{rdb: srv.Client(b)}
				for i := 0; i < pre; i += 250_000 { // in parts: each within the client's read timeout
					if err := s.rdb.Do(ctx, "debug", "populate", 250_000, fmt.Sprintf("poll:sessions:x%d", i), 60).Err(); err != nil {
						b.Fatal(err)
					}
				}
				if variant.src != "" {
					s.script = redis.NewScript(variant.src)
					if err := s.script.Load(ctx, s.rdb).Err(); err != nil {
						b.Fatal(err)
					}
				}
				servers[v] = s
			}
			b.ResetTimer()
			for batch := 0; batch < b.N; batch++ {
				b.StopTimer()
				ids := make([]string, n)
				owners := make([]any, n) // new values in every call; one per session, as the Manager made them before runs
				for i := range ids {
					ids[i] = fmt.Sprintf("session-%07d", batch*n+i)
					owners[i] = fmt.Sprintf("bench-worker-0123456789#%012x%016x", batch, i)
				}
				b.StartTimer()
				for v, variant := range variants {
					b.StopTimer()
					s := servers[v]
					call := acquireNewKeysCall(s.rdb, s.script, variant.name, ids, owners)
					before, err := redisstats.Read(ctx, s.rdb)
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					err = call()
					b.StopTimer()
					if err != nil {
						b.Fatalf("%s: %v", variant.name, err)
					}
					after, err := redisstats.Read(ctx, s.rdb)
					if err != nil {
						b.Fatal(err)
					}
					s.cpu += after.CPUSeconds - before.CPUSeconds
					s.cmd += topLevelUsec(after.Delta(before))
					b.StartTimer()
				}
			}
			b.StopTimer()
			for v, variant := range variants {
				b.ReportMetric(servers[v].cpu*1e6/float64(b.N*n), variant.name+"-redis-cpu-µs/lease")
				b.ReportMetric(servers[v].cmd/float64(b.N*n), variant.name+"-cmdstat-µs/lease")
			}
		})
	}
}

// topLevelUsec is the commandstats time of the commands a client sends (the
// scripts, and the plain commands of setnx and multi), leaving out the
// ones scripts or EXEC run, whose time is in theirs: in a variant with a
// script, the script's (and multi's WATCH, MULTI and EXEC); without, every
// command's but INFO's.
func topLevelUsec(d redisstats.Stats) float64 {
	if c, ok := d.Commands["evalsha"]; ok && c.Calls > 0 {
		usec := float64(c.Usec)
		// multi: EXEC's time holds the queued SETs' (counted under set too)
		for _, name := range []string{"watch", "multi", "exec", "unwatch"} {
			usec += float64(d.Commands[name].Usec)
		}
		return usec
	}
	usec := 0.0
	for name, c := range d.Commands {
		if name != "info" {
			usec += float64(c.Usec)
		}
	}
	return usec
}

// acquireNewKeysCall returns one call of variant over the sessions ids on
// rdb: script with the arguments its version takes, or a pipeline of SET
// NX PX without script; it checks the reply's length.
func acquireNewKeysCall(rdb *redis.Client, script *redis.Script, variant string, ids []string, owners []any) func() error {
	ctx := context.Background()
	n := len(ids)
	if script == nil {
		return func() error {
			pipe := rdb.Pipeline()
			for j, id := range ids {
				pipe.SetNX(ctx, realKeys.Lease(id), owners[j], 30*time.Second)
			}
			_, err := pipe.Exec(ctx)
			return err
		}
	}
	keys := make([]string, 0, 2*n+2)
	for _, id := range ids {
		keys = append(keys, realKeys.Lease(id), realKeys.Fencing(id))
	}
	keys = append(keys, realKeys.Epoch(0), realKeys.EpochTokens(0)) // records ignores the second
	args := []any{int64(30000), int64(0), ""}
	if strings.HasPrefix(variant, "multi") {
		args = append(args, owners[0], n)
		watch := []string{realKeys.Epoch(0), realKeys.EpochTokens(0)}
		return func() error {
			return rdb.Watch(ctx, func(tx *redis.Tx) error {
				res, err := script.EvalSha(ctx, tx, keys, args...).Int64Slice()
				if err != nil {
					return err
				}
				if res[0] == 0 {
					return fmt.Errorf("keys exist")
				}
				cmds, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					for _, id := range ids {
						p.SetNX(ctx, realKeys.Lease(id), owners[0], 30*time.Second)
					}
					p.Set(ctx, realKeys.EpochTokens(0), res[0]+int64(n)-1, 0)
					return nil
				})
				if err != nil {
					return err
				}
				for _, c := range cmds[:n] {
					if !c.(*redis.BoolCmd).Val() {
						return fmt.Errorf("not set")
					}
				}
				return nil
			}, watch...)
		}
	}
	switch variant {
	case "exists", "luafloor": // the call's one owner value, for all n sessions
		args = append(args, owners[0], n)
	default:
		args = append(args, owners...)
	}
	return func() error {
		vals, err := script.EvalSha(ctx, rdb, keys, args...).Slice()
		if err == nil && len(vals) != 4*n {
			err = fmt.Errorf("reply of %d values, want %d", len(vals), 4*n)
		}
		return err
	}
}
