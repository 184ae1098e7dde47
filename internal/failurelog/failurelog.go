// Package failurelog logs a run of failures of one kind without flooding
// the log.
package failurelog

import (
	"sync/atomic"

	"go.uber.org/zap"
)

// Log logs a run of failures of one kind (a Redis write that keeps
// failing while Redis is down) without flooding the log: the first failure
// of a run at warn level, the rest at debug level, and the first success
// after them at info level. Safe for concurrent use.
type Log struct {
	// What is what failed, as in "recording poll results".
	What    string
	failing atomic.Bool
}

// Failed logs a failure of f.What with fields.
func (f *Log) Failed(log *zap.Logger, fields ...zap.Field) {
	if !f.failing.Swap(true) {
		log.Warn(f.What+" failed; further failures are logged at debug level", fields...)
		return
	}
	log.Debug(f.What+" failed", fields...)
}

// Succeeded ends a run of failures, if one was logged.
func (f *Log) Succeeded(log *zap.Logger) {
	if f.failing.Swap(false) {
		log.Info(f.What + " works again")
	}
}
