// Package bench holds the helpers of the pollbench benchmark command: a
// throwaway redis-server or Redis Cluster, a TCP proxy that can be cut to simulate a crashed
// worker, a poll recorder, Redis statistics and summary statistics. The naive
// design that pollworker is compared against lives in bench/baseline.
//
// Nothing here is used by the library; it exists to measure it.
package bench

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"

	"github.com/pollworker/pollworker/internal/redistest"
)

// ErrNoRedis is returned by StartRedis when redis-server is not on PATH.
var ErrNoRedis = errors.New("bench: redis-server not found on PATH")

// Redis is one redis-server process on a free loopback port, without
// persistence: a redistest.Process in a temporary directory.
type Redis struct {
	Port int
	proc *redistest.Process
}

// StartRedis runs redis-server on a free loopback port without persistence
// (--bind 127.0.0.1, an empty --save, --appendonly no, --maxmemory-policy
// noeviction) and waits until it answers PING.
func StartRedis(ctx context.Context) (*Redis, error) {
	p, port, err := startServer(ctx, redistest.PickPort)
	if err != nil {
		return nil, err
	}
	return &Redis{Port: port, proc: p}, nil
}

// startServer starts a redis-server as StartRedis says, on a port from
// pick, with args added; it tries three ports, as a picked port may be
// taken meanwhile.
func startServer(ctx context.Context, pick func() (int, error), args ...string) (*redistest.Process, int, error) {
	if _, err := exec.LookPath(redistest.Binary); err != nil {
		return nil, 0, ErrNoRedis
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := pick()
		if err != nil {
			return nil, 0, err
		}
		dir, err := os.MkdirTemp("", "pollbench-redis-")
		if err != nil {
			return nil, 0, err
		}
		p, err := redistest.StartProcess(ctx, redistest.ProcessConfig{Port: port, Dir: dir,
			Args:   append([]string{"--maxmemory-policy", "noeviction"}, args...),
			OnExit: func() { _ = os.RemoveAll(dir) }})
		if err == nil {
			return p, port, nil
		}
		if ctx.Err() != nil {
			return nil, 0, err
		}
		lastErr = err
	}
	return nil, 0, lastErr
}

// Addr is host:port of the server.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// Pid is the server's process id.
func (r *Redis) Pid() int { return r.proc.Pid() }

// Stop kills the server and waits for it to exit. Safe to call twice.
func (r *Redis) Stop() { r.proc.Stop() }

// Cluster is a Redis Cluster of masters without replicas, one
// redis-server process each on loopback ports, for the cluster scenario.
type Cluster struct {
	Ports []int
	procs []*redistest.Process
}

// StartCluster starts n redis-server processes in cluster mode (as
// StartRedis starts one, plus redistest.ClusterArgs) and joins them with
// `redis-cli --cluster create`: the slots split in n equal ranges. On
// failure every process started is stopped.
func StartCluster(ctx context.Context, n int) (*Cluster, error) {
	c := &Cluster{}
	for len(c.procs) < n {
		p, port, err := startServer(ctx, redistest.PickClusterPort, redistest.ClusterArgs...)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.procs, c.Ports = append(c.procs, p), append(c.Ports, port)
	}
	if err := redistest.JoinCluster(ctx, c.Addrs()); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Addrs are the masters' host:port, in the order of their slot ranges.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Ports))
	for i, p := range c.Ports {
		out[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	return out
}

// Stop kills every master and waits for them to exit. Safe to call twice.
func (c *Cluster) Stop() {
	for _, p := range c.procs {
		p.Stop()
	}
}

// Version returns the output of `redis-server --version`.
func Version() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "unknown"
	}
	return string(trimNL(out))
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
