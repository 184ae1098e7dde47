package results

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var keys = keyspace.Space{}

// newClient returns a client that neither retries nor redials, so that
// failures are quick.
func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	return redistest.NewClient(t, addr)
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
