package poller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
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

// TestReadFailuresLoggedOncePerRun: a read failing round after round (Redis
// down, a key of the wrong type) is a warning at its first failure and at
// each new error, the same error again is at debug level, and the first
// success after them says it works again; each kind of read on its own.
func TestReadFailuresLoggedOncePerRun(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	wrongType := errors.New("key poll:{sessions}:changes is a set, not a zset")
	type step struct {
		what string
		err  error // nil: the read worked
	}
	type line struct {
		level zapcore.Level
		msg   string
	}
	tests := []struct {
		name  string
		steps []step
		want  []line
	}{
		{"one failure", []step{{"session read", refused}, {"session read", nil}}, []line{
			{zap.WarnLevel, "session read failed; the same error again is logged at debug level until it works"},
			{zap.InfoLevel, "session read works again"},
		}},
		{"a run", []step{{"session read", refused}, {"session read", refused}, {"session read", refused}, {"session read", nil}, {"session read", nil}}, []line{
			{zap.WarnLevel, "session read failed; the same error again is logged at debug level until it works"},
			{zap.DebugLevel, "session read failed again"},
			{zap.DebugLevel, "session read failed again"},
			{zap.InfoLevel, "session read works again"},
		}},
		{"a new error", []step{{"session read", refused}, {"session read", wrongType}, {"session read", wrongType}}, []line{
			{zap.WarnLevel, "session read failed; the same error again is logged at debug level until it works"},
			{zap.WarnLevel, "session read failed; the same error again is logged at debug level until it works"},
			{zap.DebugLevel, "session read failed again"},
		}},
		{"kinds apart", []step{{"discovery", refused}, {"session read", refused}, {"discovery", nil}, {"session read", refused}}, []line{
			{zap.WarnLevel, "discovery failed; the same error again is logged at debug level until it works"},
			{zap.WarnLevel, "session read failed; the same error again is logged at debug level until it works"},
			{zap.InfoLevel, "discovery works again"},
			{zap.DebugLevel, "session read failed again"},
		}},
		{"nothing failed", []step{{"session read", nil}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zap.DebugLevel)
			h := newHealth(clocktesting.NewFakeClock(time.Unix(0, 0)), time.Second, NopObserver{}, zap.New(core))
			for _, s := range tt.steps {
				if s.err != nil {
					h.redisFailed("sessions", s.what, s.err)
				} else {
					h.worksAgain(s.what)
				}
			}
			var got []line
			for _, e := range logs.All() {
				got = append(got, line{e.Level, e.Message})
			}
			require.Equal(t, tt.want, got)
		})
	}
}

// TestHeartbeatFresh: a heartbeat counts for its TTL less a drift margin
// in proportion to it, never the longer lease's: with a 3-minute lease and
// a 150 ms heartbeat, the lease's margin (1.8 s) left no time at all, and
// the worker, never live, took no session.
func TestHeartbeatFresh(t *testing.T) {
	tests := []struct {
		name       string
		ttl, drift time.Duration
		want       time.Duration
	}{
		{"defaults (heartbeat TTL = lease TTL)", 30 * time.Second, 302 * time.Millisecond, 30*time.Second - 302*time.Millisecond},
		{"short heartbeat, long lease", 450 * time.Millisecond, 1802 * time.Millisecond, 450*time.Millisecond - 6500*time.Microsecond},
		{"a smaller margin is kept", 3 * time.Second, 5 * time.Millisecond, 3*time.Second - 5*time.Millisecond},
		{"no margin", 3 * time.Second, 0, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := heartbeatFresh(tt.ttl, tt.drift)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestNotLiveSaysWhichRequestFails: not ready for a failing request says
// which and why (a heartbeat key of the wrong type, say), until it works.
func TestNotLiveSaysWhichRequestFails(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	h := newHealth(clk, time.Second, NopObserver{}, zap.NewNop())
	h.heartbeatAt.Store(clk.Now().UnixNano())
	h.redisOK.Store(true)
	require.Empty(t, h.notLive())
	h.redisFailed("heartbeat", "heartbeat", errors.New("key poll:node:x1 has the wrong type"))
	require.Equal(t, "its last request to Redis failed: heartbeat: key poll:node:x1 has the wrong type", h.notLive())
	h.redisFailed("members", "member read", errors.New("refused"))
	require.Equal(t, "its last request to Redis failed: heartbeat: key poll:node:x1 has the wrong type; member read: refused", h.notLive())
	h.worksAgain("heartbeat")
	h.worksAgain("member read")
	require.Equal(t, "its last request to Redis failed", h.notLive(), "a failed renewal records no text")
}
