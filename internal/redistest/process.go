package redistest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"time"
)

// ProcessConfig describes a redis-server to start with StartProcess.
type ProcessConfig struct {
	// Port is the loopback port to listen on (the TLS port when TLS is
	// set; then the plain port is off). Required: see PickPort.
	Port int
	// Dir is the server's working directory (--dir). Required.
	Dir string
	// TLS, if set, is the client configuration that the readiness PING
	// uses; Args must then carry the server's --tls-* options.
	TLS *tls.Config
	// Args are extra redis-server options ("--maxmemory-policy", "noeviction").
	Args []string
	// Output receives the server's stdout and stderr; nil discards them.
	Output io.Writer
	// OnExit, if set, runs once the process has exited (say, to close
	// Output or remove Dir).
	OnExit func()
}

// Process is one redis-server process without persistence, bound to
// 127.0.0.1. It needs no testing.TB: Server wraps one for tests, and
// commands such as bench/cmd/pollbench (through package bench, in the
// benchmark module) use it directly.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProcess runs redis-server as cfg says, with persistence off (an
// empty --save, --appendonly no), and waits until it answers, as itself
// (INFO's process_id): 10 s at most, less if ctx ends first. On failure
// the process is stopped; when another server holds the port, the error
// says so.
func StartProcess(ctx context.Context, cfg ProcessConfig) (*Process, error) {
	port := strconv.Itoa(cfg.Port)
	if cfg.TLS != nil {
		port = "0" // TLS only: the port is given as --tls-port
	}
	args := append([]string{
		"--port", port,
		"--bind", "127.0.0.1",
		"--dir", cfg.Dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--loglevel", "warning",
	}, cfg.Args...)
	cmd := exec.Command(Binary, args...)
	cmd.Stdout, cmd.Stderr = cfg.Output, cfg.Output
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		if cfg.OnExit != nil {
			cfg.OnExit()
		}
		close(p.done)
	}()
	addr := "127.0.0.1:" + strconv.Itoa(cfg.Port)
	ready := make(chan error, 1)
	go func() { ready <- waitReady(addr, cfg.TLS, p.done, 10*time.Second, cmd.Process.Pid) }()
	select {
	case err := <-ready:
		if err != nil {
			p.Stop()
			return nil, err
		}
		return p, nil
	case <-ctx.Done():
		p.Stop() // waitReady sees the exit and returns
		<-ready
		return nil, ctx.Err()
	}
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop kills the process and waits for it to exit (and for OnExit). Safe
// to call twice.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// PickPort returns a TCP port on 127.0.0.1 that was free a moment ago.
func PickPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
