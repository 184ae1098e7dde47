package poller

import (
	"errors"
	"time"
)

// RetryAfterError is an error a Poller returns (wrapped) when the target
// asked not to be polled again for a while (an HTTP 429 or 503 with
// Retry-After). The poll counts as failed, and the session's next poll is
// not sooner than Delay after the poll returned (nor sooner than its
// interval and backoff put it). The Poller bounds Delay.
type RetryAfterError struct {
	// Delay is how long after the poll the target asked to be left alone.
	Delay time.Duration
	// Err is the poll's failure.
	Err error
}

// Error is Err's text.
func (e *RetryAfterError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// retryDelay is the Delay of a RetryAfterError in err's chain; 0 if none.
func retryDelay(err error) time.Duration {
	var ra *RetryAfterError
	if errors.As(err, &ra) && ra.Delay > 0 {
		return ra.Delay
	}
	return 0
}
