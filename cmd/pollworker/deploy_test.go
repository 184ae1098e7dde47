package main

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
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
}
