// Package bench holds the helpers of the pollbench benchmark command: a
// throwaway redis-server, a TCP proxy that can be cut to simulate a crashed
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
	if _, err := exec.LookPath(redistest.Binary); err != nil {
		return nil, ErrNoRedis
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a picked port may be taken meanwhile
		port, err := redistest.PickPort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "pollbench-redis-")
		if err != nil {
			return nil, err
		}
		p, err := redistest.StartProcess(ctx, redistest.ProcessConfig{Port: port, Dir: dir,
			Args:   []string{"--maxmemory-policy", "noeviction"},
			OnExit: func() { _ = os.RemoveAll(dir) }})
		if err == nil {
			return &Redis{Port: port, proc: p}, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		lastErr = err
	}
	return nil, lastErr
}

// Addr is host:port of the server.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// Pid is the server's process id.
func (r *Redis) Pid() int { return r.proc.Pid() }

// Stop kills the server and waits for it to exit. Safe to call twice.
func (r *Redis) Stop() { r.proc.Stop() }

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
