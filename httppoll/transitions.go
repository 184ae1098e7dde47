package httppoll

import (
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
)

// DefaultTransitionLogEvery is how often at most a session's failure
// transitions are logged.
const DefaultTransitionLogEvery = time.Minute

// transitionLog logs a session's failure transitions at warn level: its
// first failure, with the message, and its recovery. A session's first
// failure is logged at most once per every, and a recovery only when its
// failure was, so that a flapping target does not flood the log (the
// state and the metrics still count every poll) and no failure logged
// lacks its recovery.
type transitionLog struct {
	every time.Duration

	mu   sync.Mutex
	last map[string]time.Time // session -> when its last logged failure was logged
	open map[string]bool      // sessions whose logged failure awaits its recovery line
}

// maxTransitionMemory bounds transitionLog.last: past it, entries older
// than every are forgotten.
const maxTransitionMemory = 10_000

// log logs the transition from prev to next of session id, if any and if
// allowed now.
func (t *transitionLog) log(log *zap.Logger, id string, prev, next State, now time.Time) {
	failing, wasFailing := next.Failures > 0, prev.Failures > 0
	if failing == wasFailing {
		return
	}
	if !t.allow(id, failing, now) {
		return
	}
	if failing {
		log.Warn("session failing", zap.String("session", id), zap.Int("status", next.Status),
			zap.String("class", next.Error), zap.String("message", next.Message))
		return
	}
	log.Warn("session recovered", zap.String("session", id), zap.Int("status", next.Status),
		zap.Int("failures", prev.Failures), zap.Time("failing_since", prev.FailingSince))
}

// allow reports whether a transition of id (to failing, or to recovered)
// may be logged at now, and notes it.
func (t *transitionLog) allow(id string, failing bool, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !failing {
		if !t.open[id] {
			return false
		}
		delete(t.open, id)
		return true
	}
	if at, ok := t.last[id]; ok && now.Sub(at) < t.every {
		return false
	}
	if len(t.last) >= maxTransitionMemory {
		for k, at := range t.last {
			if now.Sub(at) >= t.every {
				delete(t.last, k)
			}
		}
	}
	t.last[id] = now
	t.open[id] = true
	return true
}

// cutMessage is msg cut to MaxMessageBytes, at a rune boundary.
func cutMessage(msg string) string {
	if len(msg) <= MaxMessageBytes {
		return msg
	}
	cut := MaxMessageBytes - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return strings.Clone(msg[:cut]) + "…"
}
