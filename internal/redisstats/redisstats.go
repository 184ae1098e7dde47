// Package redisstats reads the counters a redis-server keeps about itself
// (INFO commandstats, cpu and memory), for benchmarks and tests that
// measure what Redis spent.
package redisstats

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one line of INFO commandstats.
type CommandStat struct {
	Calls int64
	Usec  int64
}

// Stats is a snapshot of the counters.
type Stats struct {
	Commands   map[string]CommandStat
	CPUSeconds float64 // used_cpu_sys + used_cpu_user
	UsedMemory int64
}

// Read reads INFO commandstats, cpu and memory.
func Read(ctx context.Context, c redis.Cmdable) (Stats, error) {
	txt, err := c.Info(ctx, "commandstats", "cpu", "memory").Result()
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Commands: map[string]CommandStat{}}
	for _, line := range strings.Split(txt, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(k, "cmdstat_"):
			var cs CommandStat
			for _, f := range strings.Split(v, ",") {
				fk, fv, _ := strings.Cut(f, "=")
				switch fk {
				case "calls":
					cs.Calls, _ = strconv.ParseInt(fv, 10, 64)
				case "usec":
					cs.Usec, _ = strconv.ParseInt(fv, 10, 64)
				}
			}
			st.Commands[strings.TrimPrefix(k, "cmdstat_")] = cs
		case k == "used_cpu_sys" || k == "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			st.CPUSeconds += f
		case k == "used_memory":
			st.UsedMemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return st, nil
}

// Delta is the difference of two snapshots, by command.
func (st Stats) Delta(before Stats) Stats {
	d := Stats{Commands: map[string]CommandStat{},
		CPUSeconds: st.CPUSeconds - before.CPUSeconds, UsedMemory: st.UsedMemory - before.UsedMemory}
	for k, v := range st.Commands {
		b := before.Commands[k]
		if v.Calls != b.Calls {
			d.Commands[k] = CommandStat{Calls: v.Calls - b.Calls, Usec: v.Usec - b.Usec}
		}
	}
	return d
}

// Calls is the number of commands, leaving out the INFO calls that take
// the snapshots.
func (st Stats) Calls() int64 {
	var n int64
	for k, v := range st.Commands {
		if k == "info" {
			continue
		}
		n += v.Calls
	}
	return n
}

// Scripts adds up the calls and time of the script commands (EVAL and
// EVALSHA).
func (st Stats) Scripts() CommandStat {
	var out CommandStat
	for _, name := range []string{"evalsha", "eval"} {
		out.Calls += st.Commands[name].Calls
		out.Usec += st.Commands[name].Usec
	}
	return out
}

// CPU is the server's CPU time (user + sys) as a duration.
func (st Stats) CPU() time.Duration {
	return time.Duration(st.CPUSeconds * float64(time.Second))
}
