package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a redis-server running in sentinel mode on loopback.
type Sentinel struct {
	Port int
}

// Addr is host:port of the sentinel.
func (s *Sentinel) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// StartSentinel runs one sentinel that monitors master as masterName with a
// quorum of 1 and a 1s down-after, so that a failover starts about a second
// after the master dies. It is stopped by t.Cleanup.
func StartSentinel(t testing.TB, masterName string, master *Server) *Sentinel {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	s := &Sentinel{Port: FreePort(t)}
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s 1000\n"+
		"sentinel failover-timeout %s 10000\n",
		s.Port, dir, masterName, master.Port, masterName, masterName)
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "sentinel.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Binary, path, "--sentinel")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("redistest: start sentinel: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	if err := waitReady(s.Addr(), nil, done, 10*time.Second, cmd.Process.Pid); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	// Wait until the sentinel knows the master.
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addr, err := c.GetMasterAddrByName(ctx, masterName).Result()
		cancel()
		if err == nil && len(addr) == 2 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel does not know %s: %v", masterName, err)
		}
		select {
		case <-done:
			t.Fatal("redistest: sentinel exited")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
