package poller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/pollworker/pollworker/session"
)

func TestRetryDelay(t *testing.T) {
	base := errors.New("429")
	require.Equal(t, 5*time.Second, retryDelay(fmt.Errorf("poll s: %w", &RetryAfterError{Delay: 5 * time.Second, Err: base})))
	require.Zero(t, retryDelay(base))
	require.Zero(t, retryDelay(&RetryAfterError{Delay: -time.Second, Err: base}))
	require.ErrorIs(t, &RetryAfterError{Delay: time.Second, Err: base}, base)
}

// TestSchedulerKeepsRetryAfter: a failed poll whose target asked for 10
// intervals of quiet is next due 10 intervals after it returned; one that
// asked for less than the interval keeps its interval.
func TestSchedulerKeepsRetryAfter(t *testing.T) {
	f := newSchedFixture(t)
	w := f.start("s")
	p := f.nextPoll()
	p.retry.Store(int64(10 * schedInterval))
	p.fail.Store(true)
	close(p.finish)
	f.waitPhase(w, queued)
	_, next := f.phaseOf(w)
	require.Equal(t, p.at.Add(10*schedInterval), next)

	for left := 10 * schedInterval; left > 0; left -= time.Second { // renewing: the wait outlasts the TTL
		require.NoError(t, f.leases.RenewAll(t.Context()).Err)
		f.stepTimer(min(left, time.Second))
	}
	p = f.nextPoll()
	p.retry.Store(int64(schedInterval / 10))
	p.fail.Store(true)
	close(p.finish)
	f.waitPhase(w, queued)
	_, next = f.phaseOf(w)
	require.Equal(t, p.at.Add(schedInterval), next, "a Retry-After shorter than the interval changes nothing")
}

// TestPollOnceSucceededButAskedToWait: a RetryAfterError without an error
// in it is an ok poll whose next poll waits the delay.
func TestPollOnceSucceededButAskedToWait(t *testing.T) {
	for _, tt := range []struct {
		name      string
		err       error
		out       outcome
		wantRetry time.Duration
	}{
		{"ok", nil, pollOK, 0},
		{"succeeded, asked to wait", fmt.Errorf("poll s: %w", &RetryAfterError{Delay: 7 * time.Second}), pollOK, 7 * time.Second},
		{"failed, asked to wait", &RetryAfterError{Delay: 5 * time.Second, Err: errors.New("429")}, pollFailed, 5 * time.Second},
		{"failed", errors.New("boom"), pollFailed, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := &turns{poller: PollFunc(func(context.Context, *Turn) error { return tt.err }), log: zap.NewNop(), obs: NopObserver{},
				clock: clock.RealClock{}, health: newHealth(clock.RealClock{}, time.Second, NopObserver{}, zap.NewNop())}
			out, retry := tr.pollOnce(context.Background(), &Turn{sess: &session.Session{ID: "s"}})
			require.Equal(t, tt.out, out)
			require.Equal(t, tt.wantRetry, retry)
		})
	}
}
