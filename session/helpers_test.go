package session

import (
	"context"
	"errors"
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

var keys = keyspace.Space{}

// newMini starts a miniredis and returns it with a Store over it.
func newMini(t testing.TB, opts ...Option) (*miniredis.Miniredis, *redis.Client, *Store) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redistest.NewClient(t, m.Addr())
	return m, c, newStore(t, c, opts...)
}

func newStore(t testing.TB, c redis.UniversalClient, opts ...Option) *Store {
	t.Helper()
	if tt, ok := t.(*testing.T); ok {
		opts = append([]Option{WithLogger(zaptest.NewLogger(tt))}, opts...)
	}
	s, err := NewStore(c, keys, opts...)
	require.NoError(t, err)
	return s
}

// ctxT is a context bounded by a deadline, cancelled when the test ends.
func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func sess(id string) Session {
	return Session{ID: id, URL: "https://example.com/" + id, Interval: Duration(time.Second)}
}

// rev returns the revisions counted since the counter started (0 before
// it exists): a missing counter starts at the server's clock (Changes).
func rev(t testing.TB, s *Store) int64 {
	t.Helper()
	n, err := s.Rev(ctxT(t))
	require.NoError(t, err)
	return n - counterStartedAt(t, s)
}

// counterStartedAt is the value the revision counter started at, 0 before
// it exists.
func counterStartedAt(t testing.TB, s *Store) int64 {
	t.Helper()
	score, err := s.client.ZScore(ctxT(t), s.keys.SessionChanges(), counterStart).Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	require.NoError(t, err)
	return int64(score)
}

func ids(ss []Session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}
