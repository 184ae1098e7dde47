package httppoll

import (
	"cmp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
)

// DefaultTransitionLogEvery is how often at most a session's failure
// transitions are logged.
const DefaultTransitionLogEvery = time.Minute

// Transition lines logged one by one per window, at most; past them a
// window's transitions are summed up in one line each for failures and
// recoveries, logged at the first poll after the window: a target going
// down under thousands of sessions would otherwise log a line per session
// at once (5k sessions of one worker: 5k lines within a second).
const (
	transitionBurst  = 10
	transitionWindow = 10 * time.Second
)

// transitionLog logs a session's failure transitions at warn level: its
// first failure, with the message, and its recovery. A session's first
// failure is logged at most once per every, and a recovery only when its
// failure was, so that a flapping target does not flood the log (the
// state and the metrics still count every poll) and no failure logged
// lacks its recovery. Across sessions, at most burst lines per window are
// logged one by one; the rest of a window's are counted and summed up
// (transitionSummary), so that no transition logged lacks its line.
type transitionLog struct {
	every         time.Duration
	burst         int           // 0: transitionBurst
	window        time.Duration // 0: transitionWindow
	mu            sync.Mutex
	last          map[string]time.Time // session -> when its last logged failure was logged
	open          map[string]bool      // sessions whose logged failure awaits its recovery line
	windowStart   time.Time            // of the current window; zero before the first line
	lines         int                  // lines logged one by one in the current window
	failing, back transitionSummary    // the current window's transitions past its lines
}

// transitionSummary counts the transitions of one kind a window did not
// log one by one.
type transitionSummary struct {
	n       int
	classes map[string]int // failures by error class
	first   []string       // the first few sessions
}

// maxSummarySessions is how many sessions a summary line names.
const maxSummarySessions = 5

func (s *transitionSummary) add(id, class string) {
	s.n++
	if len(s.first) < maxSummarySessions {
		s.first = append(s.first, id)
	}
	if class != "" {
		if s.classes == nil {
			s.classes = map[string]int{}
		}
		s.classes[class]++
	}
}

// maxTransitionMemory bounds transitionLog.last: past it, entries older
// than every are forgotten.
const maxTransitionMemory = 10_000

// log logs the transition from prev to next of session id, if any and if
// allowed now, and the summaries of a window that ended before now.
func (t *transitionLog) log(log *zap.Logger, id string, prev, next State, now time.Time) {
	failing, wasFailing := next.Failures > 0, prev.Failures > 0
	t.mu.Lock()
	done, hadDone := t.endWindowLocked(now)
	one := failing != wasFailing && t.allowLocked(id, failing, now)
	if one {
		if t.windowStart.IsZero() {
			t.windowStart = now
		}
		if t.lines >= t.burstSize() {
			one = false
			if failing {
				t.failing.add(id, next.Error)
			} else {
				t.back.add(id, "")
			}
		} else {
			t.lines++
		}
	}
	t.mu.Unlock()
	if hadDone {
		done.log(log, t.windowSize())
	}
	switch {
	case !one:
	case failing:
		log.Warn("session failing", zap.String("session", id), zap.Int("status", next.Status),
			zap.String("class", next.Error), zap.String("message", next.Message))
	default:
		log.Warn("session recovered", zap.String("session", id), zap.Int("status", next.Status),
			zap.Int("failures", prev.Failures), zap.Time("failing_since", prev.FailingSince))
	}
}

func (t *transitionLog) burstSize() int { return cmp.Or(t.burst, transitionBurst) }

func (t *transitionLog) windowSize() time.Duration { return cmp.Or(t.window, transitionWindow) }

// windowSummaries are the summaries of one window, to log.
type windowSummaries struct{ failing, back transitionSummary }

// endWindowLocked ends the current window when it is over at now, and
// returns its summaries, if any transition went past its lines.
func (t *transitionLog) endWindowLocked(now time.Time) (windowSummaries, bool) {
	if t.windowStart.IsZero() || now.Sub(t.windowStart) < t.windowSize() {
		return windowSummaries{}, false
	}
	done := windowSummaries{t.failing, t.back}
	t.windowStart, t.lines, t.failing, t.back = time.Time{}, 0, transitionSummary{}, transitionSummary{}
	return done, done.failing.n+done.back.n > 0
}

// log logs one line per kind with transitions.
func (w windowSummaries) log(log *zap.Logger, window time.Duration) {
	if w.failing.n > 0 {
		log.Warn("sessions failing, more than the log shows one by one",
			zap.Int("sessions", w.failing.n), zap.Any("classes", w.failing.classes),
			zap.Strings("first", w.failing.first), zap.Duration("window", window))
	}
	if w.back.n > 0 {
		log.Warn("sessions recovered, more than the log shows one by one",
			zap.Int("sessions", w.back.n), zap.Strings("first", w.back.first), zap.Duration("window", window))
	}
}

// allowLocked reports whether a transition of id (to failing, or to
// recovered) may be logged at now, and notes it.
func (t *transitionLog) allowLocked(id string, failing bool, now time.Time) bool {
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
