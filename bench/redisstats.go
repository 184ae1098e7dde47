package bench

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one line of INFO commandstats.
type CommandStat struct {
	Calls int64
	Usec  int64
}

// RedisStats is a snapshot of the Redis counters the benchmark compares.
type RedisStats struct {
	Commands   map[string]CommandStat
	CPUSeconds float64 // used_cpu_sys + used_cpu_user
	UsedMemory int64
}

// ReadStats reads INFO commandstats, cpu and memory.
func ReadStats(ctx context.Context, c redis.Cmdable) (RedisStats, error) {
	txt, err := c.Info(ctx, "commandstats", "cpu", "memory").Result()
	if err != nil {
		return RedisStats{}, err
	}
	st := RedisStats{Commands: map[string]CommandStat{}}
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
func (st RedisStats) Delta(before RedisStats) RedisStats {
	d := RedisStats{Commands: map[string]CommandStat{},
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
func (st RedisStats) Calls() int64 {
	var n int64
	for k, v := range st.Commands {
		if k == "info" {
			continue
		}
		n += v.Calls
	}
	return n
}
