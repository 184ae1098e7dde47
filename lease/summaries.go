package lease

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// summaryWindow is how long the summary lines of one message are gathered
// into one after the first (logSummary).
const summaryWindow = time.Second

// summary is one summary line: leases moved by a step, a few of their
// sessions.
type summary struct {
	level      zapcore.Level
	msg, event string
	leases     int
	sessions   []string
}

// summaries gathers summary lines by message: the first is logged at once,
// those within summaryWindow after it are added up and logged as one line
// when the window ends (which opens the next window if it logged).
type summaries struct {
	mu     sync.Mutex
	open   map[string]*summary // by message: a window is open; what it gathered
	window time.Duration       // summaryWindow if 0 (a test sets its own)
}

// add logs s now if no window of its message is open, and opens one;
// else adds it to the open window.
func (w *summaries) add(m *Manager, s summary) {
	w.mu.Lock()
	if g, ok := w.open[s.msg]; ok {
		g.leases += s.leases
		g.sessions = appendUpTo(g.sessions, s.sessions, summarySessions)
		w.mu.Unlock()
		return
	}
	w.openLocked(m, s)
	w.mu.Unlock()
	m.log.Log(s.level, s.msg, zap.Int("leases", s.leases), zap.String("event", s.event), zap.Strings("sessions", s.sessions))
}

// openLocked opens a window for s's message, to end summaryWindow from now.
func (w *summaries) openLocked(m *Manager, s summary) {
	if w.open == nil {
		w.open = make(map[string]*summary)
	}
	w.open[s.msg] = &summary{level: s.level, msg: s.msg, event: s.event}
	// The wall clock, not Config.Clock: the window is for whoever reads
	// the log, and a lease's timers are the only ones a test's fake clock
	// should see.
	window := w.window
	if window == 0 {
		window = summaryWindow
	}
	time.AfterFunc(window, func() { w.end(m, s.msg) })
}

// end ends the window of msg: the lines it gathered are logged as one, and
// the next window opens; none gathered, it closes.
func (w *summaries) end(m *Manager, msg string) {
	w.mu.Lock()
	g := w.open[msg]
	delete(w.open, msg)
	if g == nil || g.leases == 0 {
		w.mu.Unlock()
		return
	}
	w.openLocked(m, *g)
	w.mu.Unlock()
	m.log.Log(g.level, g.msg, zap.Int("leases", g.leases), zap.String("event", g.event), zap.Strings("sessions", g.sessions),
		zap.Bool("gathered", true))
}

// appendUpTo appends from to to, up to n elements in all.
func appendUpTo(to, from []string, n int) []string {
	for _, s := range from {
		if len(to) >= n {
			break
		}
		to = append(to, s)
	}
	return to
}
