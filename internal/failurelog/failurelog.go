// Package failurelog logs a run of failures of one kind without flooding
// the log.
package failurelog

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// Quiet is how long after a warning a new run of failures is logged at
// debug level only: a write that fails and works by turns (Redis at its
// maxmemory, say) logs one warning and one "works again" a minute, not a
// pair per batch.
const Quiet = time.Minute

// Log logs a run of failures of one kind (a Redis write that keeps
// failing while Redis is down) without flooding the log: the first failure
// of a run at warn level, the rest at debug level, and the first success
// after them at info level; a run that starts within Quiet of the last
// warning is logged at debug level until Quiet has passed. Safe for
// concurrent use.
type Log struct {
	// What is what failed, as in "recording poll results".
	What string
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu       sync.Mutex
	warned   bool      // a warning was logged, and no "works again" since
	warnedAt time.Time // of the last warning
}

func (f *Log) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// Failed logs a failure of f.What with fields.
func (f *Log) Failed(log *zap.Logger, fields ...zap.Field) {
	f.mu.Lock()
	now := f.now()
	warn := !f.warned && (f.warnedAt.IsZero() || now.Sub(f.warnedAt) >= Quiet)
	if warn {
		f.warned, f.warnedAt = true, now
	}
	f.mu.Unlock()
	if warn {
		log.Warn(f.What+" failed; further failures are logged at debug level", fields...)
		return
	}
	log.Debug(f.What+" failed", fields...)
}

// Succeeded ends a run of failures, if one was logged at warn level.
func (f *Log) Succeeded(log *zap.Logger) {
	f.mu.Lock()
	was := f.warned
	f.warned = false
	f.mu.Unlock()
	if was {
		log.Info(f.What + " works again")
	}
}
