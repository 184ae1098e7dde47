package poller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pollworker/pollworker/internal/redistest"
)

// afterRunObserver counts PollDone calls made after Run returned.
type afterRunObserver struct {
	NopObserver
	returned, late atomic.Bool
	done           atomic.Int64
}

func (o *afterRunObserver) PollDone(PollReport) {
	o.done.Add(1)
	if o.returned.Load() {
		o.late.Store(true)
	}
}

// TestRunReturnsPastAStuckPoll: a Poll that ignores its cancelled ctx is
// abandoned after DrainTimeout; Run returns saying so, the worker is no
// longer ready, and the Observer hears nothing of that poll after Run
// returned (it heard PollDone from a Run it had outlived).
func TestRunReturnsPastAStuckPoll(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	addSessions(t, client, 1, 50*time.Millisecond)
	release := make(chan struct{})
	stuck := make(chan struct{}, 1)
	finished := make(chan struct{})
	obs := &afterRunObserver{}
	cfg := fastConfig(client, "a", PollFunc(func(ctx context.Context, _ *Turn) error {
		select {
		case stuck <- struct{}{}:
			<-release // ignores ctx
			defer close(finished)
		default:
		}
		return nil
	}))
	cfg.DrainTimeout = 200 * time.Millisecond
	cfg.Observer = obs
	c, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-stuck:
	case <-time.After(20 * time.Second):
		t.Fatal("no poll started")
	}
	require.Eventually(t, c.Ready, 20*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return past the stuck poll")
	}
	obs.returned.Store(true)
	require.ErrorContains(t, err, "drain timed out waiting for 1 polls")
	require.False(t, c.Ready())
	require.Equal(t, "stopped: Run returned", c.NotReady())
	require.ErrorIs(t, c.Run(context.Background()), ErrRunTwice, "a Coordinator runs once")
	close(release)
	<-finished
	// The poll's own bookkeeping after it returned runs on; wait for the
	// scheduler's runner to be done with it before looking.
	require.Eventually(t, func() bool { return c.PollStats().Running == 0 }, 10*time.Second, 10*time.Millisecond)
	require.False(t, obs.late.Load(), "PollDone after Run returned")
}

// TestTypedNilClientRefused: a nil *redis.Client in the Client interface
// is refused by New, not found by a background goroutine's panic.
func TestTypedNilClientRefused(t *testing.T) {
	_, err := New(Config{Client: (*redis.Client)(nil), ID: "a", Poller: PollFunc(func(context.Context, *Turn) error { return nil })})
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "Client is required")
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = client.Close() })
	_, err = New(Config{Client: client, ID: "a", Poller: PollFunc(nil)})
	require.ErrorContains(t, err, "Poller is required")
}

// TestNewWarnsWithoutContextTimeouts: a client that ignores its contexts'
// deadlines (ContextTimeoutEnabled off) gets a warning from New: its
// leases would go Uncertain at its read timeout, later than RequestTimeout.
func TestNewWarnsWithoutContextTimeouts(t *testing.T) {
	mr := miniredis.RunT(t)
	p := PollFunc(func(context.Context, *Turn) error { return nil })
	for _, enabled := range []bool{false, true} {
		client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: enabled})
		t.Cleanup(func() { _ = client.Close() })
		core, logs := observer.New(zapcore.WarnLevel)
		_, err := New(Config{Client: client, Poller: p, Logger: zap.New(core)})
		require.NoError(t, err)
		require.Equal(t, !enabled, logs.FilterMessageSnippet("ContextTimeoutEnabled is off").Len() == 1, "enabled %v", enabled)
	}
}
