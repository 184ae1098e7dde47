package httppoll

import (
	"sync/atomic"

	"go.uber.org/zap"
)

// failureLog logs a run of failures of one kind (a Redis write that keeps
// failing while Redis is down) without flooding the log: the first failure
// of a run at warn level, the rest at debug level, and the first success
// after them at info level. Safe for concurrent use.
type failureLog struct {
	what    string // what failed, as in "recording poll results"
	failing atomic.Bool
}

// failed logs a failure of f.what with fields.
func (f *failureLog) failed(log *zap.Logger, fields ...zap.Field) {
	if !f.failing.Swap(true) {
		log.Warn(f.what+" failed; further failures are logged at debug level", fields...)
		return
	}
	log.Debug(f.what+" failed", fields...)
}

// succeeded ends a run of failures, if one was logged.
func (f *failureLog) succeeded(log *zap.Logger) {
	if f.failing.Swap(false) {
		log.Info(f.what + " works again")
	}
}
