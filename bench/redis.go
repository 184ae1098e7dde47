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
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoRedis is returned by StartRedis when redis-server is not on PATH.
var ErrNoRedis = errors.New("bench: redis-server not found on PATH")

// Redis is one redis-server process on a free loopback port, without
// persistence.
type Redis struct {
	Port int
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis runs redis-server on a free loopback port without persistence
// (--bind 127.0.0.1, an empty --save, --appendonly no) and waits until it
// answers PING.
func StartRedis(ctx context.Context) (*Redis, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedis
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		r, err := startOn(ctx, path, port)
		if err == nil {
			return r, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startOn(ctx context.Context, path string, port int) (*Redis, error) {
	dir, err := os.MkdirTemp("", "pollbench-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--maxmemory-policy", "noeviction")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	r := &Redis{Port: port, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = os.RemoveAll(dir); close(r.done) }()
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return r, nil
		}
		select {
		case <-r.done:
			return nil, fmt.Errorf("redis-server on port %d exited: %w", port, err)
		case <-ctx.Done():
			r.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.Stop()
			return nil, fmt.Errorf("redis-server on port %d: no PING reply: %w", port, err)
		}
	}
}

// Addr is host:port of the server.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// Pid is the server's process id.
func (r *Redis) Pid() int { return r.cmd.Process.Pid }

// Stop kills the server and waits for it to exit. Safe to call twice.
func (r *Redis) Stop() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Kill()
	<-r.done
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
