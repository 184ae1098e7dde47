package poller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestRedisFailedIgnoresAStoppingWorker: a round's read that fails because
// the worker is stopping (its context cancelled) is not a Redis failure:
// not counted, not logged ("session read failed: context canceled" was a
// warning at every SIGTERM); a real failure is both.
func TestRedisFailedIgnoresAStoppingWorker(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		failed bool
	}{
		{"cancelled", fmt.Errorf("read session changes: %w", context.Canceled), false},
		{"timeout", fmt.Errorf("read session changes: %w", context.DeadlineExceeded), true},
		{"refused", errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			h := newHealth(clocktesting.NewFakeClock(time.Unix(0, 0)), time.Second, NopObserver{}, zap.New(core))
			h.redisOK.Store(true)
			h.redisFailed("sessions", "session read", tc.err)
			require.Equal(t, !tc.failed, h.redisOK.Load())
			require.Equal(t, map[bool]int{true: 1, false: 0}[tc.failed], logs.Len())
		})
	}
}
