package session

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// serverCost is what a redis-server says it has spent: its CPU time
// (INFO cpu, used_cpu_user + used_cpu_sys) and the time it counted in
// commands (INFO commandstats usec, by command).
type serverCost struct {
	cpu  time.Duration
	usec map[string]int64
}

func readServerCost(tb testing.TB, c redis.Cmdable) serverCost {
	tb.Helper()
	txt, err := c.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	sc := serverCost{usec: map[string]int64{}}
	var cpu float64
	for _, line := range strings.Split(txt, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_user" || k == "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		case strings.HasPrefix(k, "cmdstat_"):
			for _, f := range strings.Split(v, ",") {
				if fv, ok := strings.CutPrefix(f, "usec="); ok {
					sc.usec[strings.TrimPrefix(k, "cmdstat_")], _ = strconv.ParseInt(fv, 10, 64)
				}
			}
		}
	}
	sc.cpu = time.Duration(cpu * float64(time.Second))
	return sc
}

// reportServerCost reports the server's CPU and command time since before,
// per key read (n keys), as redis-cpu-ns/key and redis-cmd-ns/key. The
// commands a script calls are counted within its EVALSHA, so when there is
// one only EVAL and EVALSHA are summed; INFO is left out.
func reportServerCost(b *testing.B, c redis.Cmdable, before serverCost, n int) {
	b.Helper()
	after := readServerCost(b, c)
	delta := func(cmd string) int64 { return after.usec[cmd] - before.usec[cmd] }
	var usec int64
	if scripts := delta("evalsha") + delta("eval"); scripts > 0 {
		usec = scripts
	} else {
		for cmd := range after.usec {
			if cmd != "info" {
				usec += delta(cmd)
			}
		}
	}
	b.ReportMetric(float64((after.cpu-before.cpu).Nanoseconds())/float64(n), "redis-cpu-ns/key")
	b.ReportMetric(float64(usec*1000)/float64(n), "redis-cmd-ns/key")
}
