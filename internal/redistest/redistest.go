// Package redistest starts throwaway redis-server processes on free loopback
// ports for tests, and stops them when the test ends.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Binary is the redis-server executable looked up on PATH.
const Binary = "redis-server"

// Server is one redis-server process bound to 127.0.0.1.
type Server struct {
	t    testing.TB
	Port int
	Dir  string
	args []string
	tls  *tls.Config // set for TLS-only servers (StartTLS)

	mu   sync.Mutex
	proc *Process // nil while stopped
}

// Require skips the test when redis-server is missing, unless CI is set, in
// which case it fails: CI must run every real-Redis test.
func Require(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath(Binary)
	if err != nil {
		msg := "redis-server not found on PATH: run `make test` as root (it installs it) or `apt-get install redis-server`"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// Start runs a redis-server without persistence on a free loopback port.
// Extra args are redis-server command-line options ("--appendonly", "yes").
// The server is stopped by t.Cleanup.
// A port another server took between the pick and the bind (parallel
// tests pick too) is picked again, up to 5 times.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	Require(t)
	for attempt := 1; ; attempt++ {
		s := &Server{t: t, Port: FreePort(t), Dir: t.TempDir(), args: args}
		err := s.launch()
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			t.Fatalf("redistest: %v", err)
		}
		t.Logf("redistest: %v; picking another port", err)
	}
}

// StartPort is Start on a given loopback port, for tests that point a
// client at a port before the server is up.
func StartPort(t testing.TB, port int, args ...string) *Server {
	t.Helper()
	Require(t)
	s := &Server{t: t, Port: port, Dir: t.TempDir(), args: args}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is a redis:// URL for the server.
func (s *Server) URL() string {
	if s.tls != nil {
		return "rediss://" + s.Addr()
	}
	return "redis://" + s.Addr()
}

// Client returns a go-redis client for the server, closed by t.Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: s.tls})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) start() {
	s.t.Helper()
	if err := s.launch(); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

// launch starts the process; the error carries the server's log.
func (s *Server) launch() error {
	logf, err := os.Create(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return err
	}
	p, err := StartProcess(context.Background(), ProcessConfig{Port: s.Port, Dir: s.Dir, TLS: s.tls,
		Args: s.args, Output: logf, OnExit: func() { _ = logf.Close() }})
	if err != nil {
		_ = logf.Close()
		log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
		if !errors.Is(err, errPortTaken) && strings.Contains(string(log), "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortTaken, err) // it exited before another answered
		}
		return fmt.Errorf("%w\n%s", err, log)
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

// Stop kills the server and waits for it to exit. Safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		p.Stop()
	}
}

// Restart stops the server and starts it again on the same port and dir.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Running reports whether the process is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// Pid is the process id of the running server, or 0.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid()
}

func waitReady(addr string, tlsConf *tls.Config, done <-chan struct{}, limit time.Duration, pid int) error {
	deadline := time.Now().Add(limit)
	other := 0 // the pid of another server found answering on addr
	exited := func() error {
		if other != 0 {
			return fmt.Errorf("%w: %s is answered by another redis-server (pid %d), ours (pid %d) exited", errPortTaken, addr, other, pid)
		}
		return fmt.Errorf("redis-server on %s exited during start", addr)
	}
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return exited()
		default:
		}
		got, err := serverPID(addr, tlsConf)
		switch {
		case err != nil:
		case pid == 0 || got == pid:
			return nil
		default:
			other = got // ours cannot bind: it exits soon
		}
		select {
		case <-done:
			return exited()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("redis-server on %s not ready after %v", addr, limit)
}

// errPortTaken: the port picked for a server was taken by another one
// before it could bind (ports are picked free and bound a moment later;
// parallel tests pick too).
var errPortTaken = errors.New("port taken")

// serverPID asks the server on addr for its process id (INFO server): a
// readiness check that also tells whose server answers.
func serverPID(addr string, tlsConf *tls.Config) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var c net.Conn
	var err error
	if tlsConf != nil {
		c, err = (&tls.Dialer{Config: tlsConf}).DialContext(ctx, "tcp", addr)
	} else {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if !strings.HasPrefix(line, "$") || err != nil || n < 0 {
		return 0, fmt.Errorf("info: %q", line) // -LOADING, say
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("info: no process_id")
}

// Client returns a go-redis client for a redis:// URL, closed by t.Cleanup.
func Client(t testing.TB, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := PickPort()
	if err != nil {
		t.Fatalf("redistest: free port: %v", err)
	}
	return port
}
