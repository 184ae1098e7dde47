package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters on loopback ports, without replicas.
type Cluster struct {
	Servers []*Server
}

// StartCluster starts n redis-server processes in cluster mode and joins
// them with `redis-cli --cluster create`; all are stopped by t.Cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	Require(t)
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redistest: redis-cli not found (it comes with redis-server's package): %v", err)
	}
	c := &Cluster{}
	args := []string{"--cluster", "create"}
	for range n {
		s := StartPort(t, clusterPort(t), "--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-config-file", "nodes.conf")
		c.Servers = append(c.Servers, s)
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range c.Servers {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr()})
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				_ = cl.Close()
				t.Fatalf("redistest: cluster not ok on %s: %v %s", s.Addr(), err, info)
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		_ = cl.Close()
	}
	return c
}

// Addrs are the host:port of every master.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = "127.0.0.1:" + strconv.Itoa(s.Port)
	}
	return out
}

// Client returns a cluster client, closed by t.Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// clusterPort returns a loopback port p that was free a moment ago with
// p+10000 free too: a cluster node also listens on its bus port, p+10000,
// and a node whose bus port is taken exits at start.
func clusterPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		p := FreePort(t)
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p
	}
	t.Fatalf("redistest: no free port p with p+10000 free on 127.0.0.1")
	return 0
}

// SlotOwner is the index in Servers of the master that serves slot, in
// that master's own view.
func (c *Cluster) SlotOwner(t testing.TB, slot uint16) int {
	t.Helper()
	ctx := context.Background()
	for i, s := range c.Servers {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr()})
		id, err := cl.ClusterMyID(ctx).Result()
		ranges, err2 := cl.ClusterSlots(ctx).Result()
		_ = cl.Close()
		if err != nil || err2 != nil {
			t.Fatalf("redistest: slots of %s: %v %v", s.Addr(), err, err2)
		}
		for _, r := range ranges {
			if int(slot) >= r.Start && int(slot) <= r.End && len(r.Nodes) > 0 && r.Nodes[0].ID == id {
				return i
			}
		}
	}
	t.Fatalf("redistest: no master serves slot %d", slot)
	return -1
}

// MigrateSlot moves slot, with every key in it, to Servers[to], as
// `redis-cli --cluster reshard` does: IMPORTING and MIGRATING, MIGRATE of
// the keys in batches, then SETSLOT NODE on every master. Clients follow
// with the MOVED and ASK redirections they get meanwhile.
func (c *Cluster) MigrateSlot(t testing.TB, slot uint16, to int) {
	t.Helper()
	from := c.SlotOwner(t, slot)
	if from == to {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clients := make([]*redis.Client, len(c.Servers))
	for i, s := range c.Servers {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer func() { _ = clients[i].Close() }()
	}
	src, dst := clients[from], clients[to]
	do := func(cl *redis.Client, args ...any) {
		t.Helper()
		if err := cl.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("redistest: %v: %v", args, err)
		}
	}
	do(dst, "cluster", "setslot", slot, "importing", src.ClusterMyID(ctx).Val())
	toID := dst.ClusterMyID(ctx).Val()
	do(src, "cluster", "setslot", slot, "migrating", toID)
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
		if err != nil {
			t.Fatalf("redistest: getkeysinslot %d: %v", slot, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", "127.0.0.1", c.Servers[to].Port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		do(src, args...)
	}
	for _, cl := range clients {
		do(cl, "cluster", "setslot", slot, "node", toID)
	}
}
