package faultproxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pollworker/pollworker/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"))
}

func TestFaults(t *testing.T) {
	rds := redistest.Start(t)
	p, err := Start(rds.Addr())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	ping := func(limit time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	require.NoError(t, ping(time.Second))

	p.Partition()
	require.Error(t, ping(200*time.Millisecond), "partitioned")
	p.Heal()
	require.NoError(t, ping(time.Second), "healed")

	p.SetDelay(300 * time.Millisecond)
	require.Error(t, ping(200*time.Millisecond), "slower than the timeout")
	p.Heal()
	require.NoError(t, ping(time.Second))

	raw, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer raw.Close()
	_, err = raw.Write([]byte("PING\r\n"))
	require.NoError(t, err)
	buf := make([]byte, 16)
	_, err = raw.Read(buf)
	require.NoError(t, err)
	p.Reset()
	require.NoError(t, raw.SetReadDeadline(time.Now().Add(time.Second)))
	_, err = raw.Read(buf)
	require.Error(t, err, "reset closes the connection")
}

func TestCloseCutsOffForGood(t *testing.T) {
	rds := redistest.Start(t)
	p, err := Start(rds.Addr())
	require.NoError(t, err)
	raw, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer raw.Close()
	p.Close()
	require.NoError(t, raw.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = raw.Read(make([]byte, 1))
	require.Error(t, err, "the connection is closed")
	_, err = net.Dial("tcp", p.Addr())
	require.Error(t, err, "new connections are refused")
	p.Close()
}
