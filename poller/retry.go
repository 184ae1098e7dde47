package poller

import (
	"errors"
	"fmt"
	"time"
)

// RetryAfterError is an error a Poller returns (wrapped) when the target
// asked not to be polled again for a while (an HTTP 429 or 503 with
// Retry-After). The poll counts as failed, and the session's next poll is
// not sooner than Delay after the poll returned (nor sooner than its
// interval and backoff put it). The Poller bounds Delay. With Err nil the
// poll succeeded (a status the session expects, 429 say) and only the
// delay applies: it counts as ok.
type RetryAfterError struct {
	// Delay is how long after the poll the target asked to be left alone.
	Delay time.Duration
	// Err is the poll's failure; nil for a poll that succeeded.
	Err error
}

// Error is Err's text, or says the delay asked when Err is nil.
func (e *RetryAfterError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("the target asked to be left alone for %v", e.Delay)
	}
	return e.Err.Error()
}

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
