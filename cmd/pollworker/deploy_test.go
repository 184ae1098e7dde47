package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

func TestConnKinds(t *testing.T) {
	tests := []struct {
		name    string
		give    connOptions
		want    string // type of the client, or the error
		wantErr bool
	}{
		{"single", connOptions{RedisURL: "redis://127.0.0.1:6379/2"}, "*redis.Client", false},
		{"cluster seeds", connOptions{RedisURL: "redis://127.0.0.1:7000,redis://127.0.0.1:7001", Cluster: true}, "*redis.ClusterClient", false},
		{"sentinel", connOptions{RedisURL: "redis://:pw@127.0.0.1:26379/1", Sentinel: "mymaster"}, "*redis.Client", false},
		{"two urls without a mode", connOptions{RedisURL: "redis://a:1,redis://b:2"}, "add --redis-cluster or --redis-sentinel-master", true},
		{"cluster and sentinel", connOptions{RedisURL: "redis://a:1", Cluster: true, Sentinel: "m"}, "exclude each other", true},
		{"cluster db", connOptions{RedisURL: "redis://a:1/3", Cluster: true}, "only database 0", true},
		{"cert without key", connOptions{RedisURL: "rediss://a:1", TLSCert: "x.pem"}, "go together", true},
		{"missing ca", connOptions{RedisURL: "rediss://a:1", TLSCA: "/nonexistent/ca.pem"}, "--redis-tls-ca", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.give.KeyPrefix, tt.give.SessionPrefix = "poll", "session"
			cfg, err := parseConn(tt.give)
			if tt.wantErr {
				require.ErrorContains(t, err, tt.want)
				return
			}
			require.NoError(t, err)
			require.True(t, cfg.Redis.ContextTimeoutEnabled, "round trips must honour context deadlines")
			c := cfg.newClient()
			defer c.Close()
			require.Equal(t, tt.want, typeName(c))
		})
	}
}

func typeName(c redis.UniversalClient) string {
	switch c.(type) {
	case *redis.ClusterClient:
		return "*redis.ClusterClient"
	case *redis.Client:
		return "*redis.Client"
	}
	return "other"
}

// TestCLIOnRedisCluster adds a session and runs a worker against a real
// three-master Redis Cluster through the command line.
func TestCLIOnRedisCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	url := "redis://" + cluster.Addrs()[0] + ",redis://" + cluster.Addrs()[1]
	r := runApp(t, "sessions", "--redis-url", url, "--redis-cluster", "add", "--id", "c1", "--url", "http://127.0.0.1:1/", "--interval", "100ms")
	require.Equal(t, exitOK, r.code, r.stderr)

	ctx, cancel := context.WithCancel(ctxT(t))
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	exited := make(chan struct{})
	args := append([]string{"pollworker", "run", "--redis-url", url, "--redis-cluster", "--id", "cw"}, fastTimings...)
	go func() { done <- run(ctx, args, &stdout, &stderr, nil); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })
	client := cluster.Client(t)
	require.Eventually(t, func() bool {
		v, err := client.Get(ctx, "poll:lease:{c1}").Result()
		return err == nil && len(v) > 3 && v[:3] == "cw#"
	}, 15*time.Second, 20*time.Millisecond, stderr.String())

	r = runApp(t, "status", "--redis-url", url, "--redis-cluster", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"cw"`)
	select {
	case c := <-done:
		t.Fatalf("worker exited early: %d %s", c, stderr.String())
	default:
	}

	// A plain --redis-url to a node of the cluster, without --redis-cluster,
	// is refused (exit 2) naming the flag, rather than retried for ever on
	// MOVED: pointed at a node that owns neither the node index's slot nor
	// the worker's heartbeat key's, so that the preflight meets a MOVED.
	node := -1
	for i := range cluster.Addrs() {
		if cluster.SlotOwner(t, keyspace.Slot("poll:nodes")) != i && cluster.SlotOwner(t, keyspace.Slot("poll:node:plain")) != i {
			node = i
		}
	}
	require.NotEqual(t, -1, node)
	code, errOut, _ := runUntilExit(t, "--redis-url", "redis://"+cluster.Addrs()[node]+"/0", "--id", "plain")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, lastLine(errOut), "names a node of a Redis Cluster: add --redis-cluster")

	// So is the node that owns the node index's slot, where no MOVED
	// comes (INFO cluster says it): it used to join the fleet, be planned
	// sessions and poll only those of its own slots.
	owner := cluster.SlotOwner(t, keyspace.Slot("poll:nodes"))
	id := ""
	for i := 0; id == ""; i++ { // a worker whose heartbeat key is there too
		if c := fmt.Sprintf("plain%d", i); cluster.SlotOwner(t, keyspace.Slot("poll:node:"+c)) == owner {
			id = c
		}
	}
	code, errOut, _ = runUntilExit(t, "--redis-url", "redis://"+cluster.Addrs()[owner]+"/0", "--id", id)
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, lastLine(errOut), "names a node of a Redis Cluster: add --redis-cluster")
}

// TestRunWrongKindOfServerExit2: --redis-cluster or --redis-sentinel-master
// with a --redis-url that names a standalone server is refused (exit 2)
// naming the flag, by run and by the other commands; run retried for ever
// before ("Redis does not answer yet").
func TestRunWrongKindOfServerExit2(t *testing.T) {
	srv := redistest.Start(t)
	tests := []struct {
		name string
		flag []string
		want string
	}{
		{"cluster", []string{"--redis-cluster"}, "--redis-cluster is set, but the server is not a Redis Cluster node (cluster support disabled)"},
		{"sentinel", []string{"--redis-sentinel-master", "mymaster"}, "--redis-sentinel-master is set, so --redis-url must name the sentinels, and this server is not one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--redis-url", srv.URL(), "--id", "k-" + tt.name}, tt.flag...)
			code, stderr, took := runUntilExit(t, args...)
			require.Equal(t, exitUsage, code, stderr)
			require.Contains(t, lastLine(stderr), tt.want)
			require.Less(t, took, 10*time.Second)

			r := runApp(t, append(append([]string{"sessions", "--redis-url", srv.URL()}, tt.flag...), "list")...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, tt.want)
		})
	}
}

// fakeRedisError is a reply error as go-redis returns them.
type fakeRedisError string

func (e fakeRedisError) Error() string { return string(e) }
func (fakeRedisError) RedisError()     {}

// TestTopologyProblem: only what says the server is of another kind than
// the flags say is a configuration error; an outage stays retried.
func TestTopologyProblem(t *testing.T) {
	plain, cluster, sentinel := connConfig{}, connConfig{Cluster: true}, connConfig{Sentinel: "m"}
	refused := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	tests := []struct {
		name string
		err  error
		c    connConfig
		want string // a part of the problem; "" for none
	}{
		{"cluster flag, standalone server", fakeRedisError("ERR This instance has cluster support disabled"), cluster, "not a Redis Cluster node"},
		{"cluster flag, outage", refused, cluster, ""},
		{"sentinel flag, plain server", errors.New("redis: all sentinels specified in configuration are unreachable: ERR unknown command 'sentinel', with args beginning with: 'get-master-addr-by-name'"), sentinel, "this server is not one"},
		{"sentinel flag, sentinels down", errors.New("redis: all sentinels specified in configuration are unreachable: dial tcp: connection refused"), sentinel, ""},
		{"plain URL, cluster node", fakeRedisError("MOVED 1234 127.0.0.1:7001"), plain, "add --redis-cluster"},
		{"plain URL, cluster down", fakeRedisError("CLUSTERDOWN The cluster is down"), plain, "add --redis-cluster"},
		{"cluster flag, MOVED is the client's business", fakeRedisError("MOVED 1234 127.0.0.1:7001"), cluster, ""},
		{"plain URL, a sentinel (publish)", fakeRedisError("ERR Only HELLO messages are accepted by Sentinel instances."), plain, "names a sentinel"},
		{"plain URL, a sentinel (get)", fakeRedisError("ERR unknown command 'get', with args beginning with: 'poll:{sessions}:rev'"), plain, "names a sentinel"},
		{"an old server", fakeRedisError("ERR unknown command 'getdel', with args beginning with: 'session:a'"), plain, "older than 6.2"},
		{"a renamed command", fakeRedisError("ERR unknown command 'evalsha', with args beginning with: 'ff66'"), cluster, "renamed or disabled"},
		{"plain URL, outage", refused, plain, ""},
		{"no error", nil, plain, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := topologyProblem(tt.err, tt.c)
			if tt.want == "" {
				require.Empty(t, got)
				return
			}
			require.Contains(t, got, tt.want)
		})
	}
}

// TestRunCommandRenamedExit2: a Redis whose scripting commands are
// renamed away (rename-command, as some managed offerings do) is refused
// with exit 2 naming the cause, by run and by a session write; run
// retried it for ever before.
func TestRunCommandRenamedExit2(t *testing.T) {
	srv := redistest.Start(t, "--rename-command", "EVALSHA", "hidden_evalsha", "--rename-command", "EVAL", "hidden_eval")
	const want = "this Redis does not know a command pollworker needs: renamed or disabled in its configuration (rename-command)"
	code, stderr, took := runUntilExit(t, "--redis-url", srv.URL(), "--id", "renamed")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, lastLine(stderr), want)
	require.Less(t, took, 10*time.Second)
	r := runApp(t, "sessions", "--redis-url", srv.URL(), "add", "--id", "c1", "--url", "http://127.0.0.1:1/", "--interval", "1s")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, want)
}
