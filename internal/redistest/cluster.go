package redistest

import (
	"context"
	"fmt"
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

// ClusterArgs are the redis-server options of a cluster master as
// StartCluster runs it: cluster mode, nodes.conf in the server's
// directory, and a node timeout of 15 s. With the 2 s it had, a master
// starved of CPU on a loaded 2-core machine was marked failed by the
// others, and the whole cluster (no replicas) answered CLUSTERDOWN until
// it was back: pollbench's cluster cold start under load average 14 saw
// 160,000 renewals fail so. No test stops a master of a cluster.
var ClusterArgs = []string{"--cluster-enabled", "yes", "--cluster-node-timeout", "15000",
	"--cluster-config-file", "nodes.conf"}

// StartCluster starts n redis-server processes in cluster mode and joins
// them with `redis-cli --cluster create`; all are stopped by t.Cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	Require(t)
	c := &Cluster{}
	var addrs []string
	for range n {
		s := StartPort(t, clusterPort(t), ClusterArgs...)
		c.Servers = append(c.Servers, s)
		addrs = append(addrs, s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := JoinCluster(ctx, addrs); err != nil {
		t.Fatal(err)
	}
	return c
}

// JoinCluster makes the empty cluster-mode servers at addrs one cluster of
// masters without replicas (`redis-cli --cluster create`, which splits the
// slots in equal ranges in the order of addrs) and waits until every one
// reports cluster_state:ok. It needs no testing.TB: commands such as
// bench/cmd/pollbench use it with servers they start themselves.
func JoinCluster(ctx context.Context, addrs []string) error {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return fmt.Errorf("redistest: redis-cli not found (it comes with redis-server's package): %w", err)
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, addr := range addrs {
		cl := redis.NewClient(&redis.Options{Addr: addr})
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				_ = cl.Close()
				return fmt.Errorf("redistest: cluster not ok on %s: %v %s", addr, err, info)
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		_ = cl.Close()
	}
	return nil
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

// clusterPort is PickClusterPort for tests.
func clusterPort(t testing.TB) int {
	t.Helper()
	p, err := PickClusterPort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// PickClusterPort returns a loopback port p that was free a moment ago
// with p+10000 free too: a cluster node also listens on its bus port,
// p+10000, and a node whose bus port is taken exits at start.
func PickClusterPort() (int, error) {
	for range 100 {
		p, err := PickPort()
		if err != nil {
			return 0, err
		}
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("redistest: no free port p with p+10000 free on 127.0.0.1")
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

// Reshard moves n slots from Servers[from] to Servers[to] with the real
// `redis-cli --cluster reshard` (which takes the source's lowest slots
// first: from slot 0 for the first master of a fresh cluster) and returns
// its run time. Clients follow with the MOVED and ASK redirections they
// get meanwhile.
func (c *Cluster) Reshard(t testing.TB, from, to, n int) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := func(i int) string {
		cl := redis.NewClient(&redis.Options{Addr: c.Servers[i].Addr()})
		defer func() { _ = cl.Close() }()
		v, err := cl.ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatalf("redistest: cluster myid of %s: %v", c.Servers[i].Addr(), err)
		}
		return v
	}
	t0 := time.Now()
	out, err := exec.CommandContext(ctx, "redis-cli", "--cluster", "reshard", c.Servers[from].Addr(),
		"--cluster-from", id(from), "--cluster-to", id(to), "--cluster-slots", strconv.Itoa(n),
		"--cluster-yes").CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster reshard: %v\n%s", err, out)
	}
	return time.Since(t0)
}
