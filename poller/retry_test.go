package poller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
