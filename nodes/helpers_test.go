package nodes

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the fake server time the miniredis tests start at.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// newMini starts a miniredis whose TIME and key TTLs follow m.SetTime, and a
// client for it.
func newMini(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(t0)
	m.ClockTTL(true)
	return m, redistest.NewClient(t, m.Addr())
}

// newRegistry returns a Registry for id with the given TTL.
func newRegistry(t *testing.T, c redis.Cmdable, id string, ttl time.Duration) *Registry {
	t.Helper()
	r, err := New(Config{Client: c, ID: id, TTL: ttl, Version: "test", Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	return r
}

func heartbeat(t *testing.T, rs ...*Registry) {
	t.Helper()
	for _, r := range rs {
		require.NoError(t, r.Heartbeat(context.Background()))
	}
}

func members(t *testing.T, r *Registry) Membership {
	t.Helper()
	m, err := r.Members(context.Background())
	require.NoError(t, err)
	return m
}

var testKeys = keyspace.Space{}
