package redistest

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// NewClient returns a client for addr (a miniredis or a Server) that
// neither retries commands nor redials, so that tests of failures do not
// wait through backoffs. It is closed by t.Cleanup.
func NewClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
