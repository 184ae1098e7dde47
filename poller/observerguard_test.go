package poller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pollworker/pollworker/internal/redistest"
)

// panickyObserver panics in PollDone and LeaseEvent.
type panickyObserver struct{ NopObserver }

func (panickyObserver) PollDone(PollReport) { panic("metrics bug") }
func (panickyObserver) LeaseEvent(Event)    { panic("metrics bug") }

// TestObserverPanicsAreRecovered: an Observer whose methods panic costs
// its own calls, not the worker: the session is acquired and polled on,
// each panic is counted, and each method's first is logged at error level
// (the next at debug level).
func TestObserverPanicsAreRecovered(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	putSessions(t, client, map[string]time.Duration{"obs-0": 50 * time.Millisecond})
	var polls atomic.Int64
	cfg := fastConfig(client, "a", PollFunc(func(context.Context, *Turn) error { polls.Add(1); return nil }))
	core, logs := observer.New(zapcore.DebugLevel)
	cfg.Observer, cfg.Logger = panickyObserver{}, zap.New(core)
	r := start(t, cfg)
	require.Eventually(t, func() bool { return polls.Load() >= 5 && r.c.Status().ObserverPanics >= 6 }, 30*time.Second, 5*time.Millisecond)
	errorsLogged := map[string]int{}
	for _, e := range logs.FilterLevelExact(zapcore.ErrorLevel).All() {
		errorsLogged[e.Message]++
	}
	require.Equal(t, map[string]int{
		"Observer.PollDone panicked; recovered, the worker goes on (the same method's next panics are logged at debug level)":   1,
		"Observer.LeaseEvent panicked; recovered, the worker goes on (the same method's next panics are logged at debug level)": 1,
	}, errorsLogged)
	require.NotEmpty(t, logs.FilterMessage("Observer.PollDone panicked again").All())
}
