package poller

import (
	"sync"

	"go.uber.org/zap"
)

// badData remembers the bad records this worker has reported, so that
// each is logged and counted once, not at every read. Safe for concurrent
// use (poll goroutines report states).
type badData struct {
	mu     sync.Mutex
	states map[string]string // session -> problem of its corrupt state, as reported
}

// noteState reports, once per session and problem, that session's saved
// state was corrupt (problem) and read as never saved; a readable state
// (problem "") lets it be reported again later.
func (c *Coordinator) noteState(session, problem string) {
	b := &c.bad
	b.mu.Lock()
	prev, seen := b.states[session]
	switch {
	case problem == "":
		if seen {
			delete(b.states, session)
		}
	case b.states == nil:
		b.states = map[string]string{session: problem}
	default:
		b.states[session] = problem
	}
	b.mu.Unlock()
	if problem == "" || prev == problem {
		return
	}
	c.cfg.Observer.BadData(BadDataState)
	c.log.Error("saved state of the session is corrupt: polling it as never saved; the next save overwrites it (copy the key now to keep it)",
		zap.String("session", session), zap.String("event", "corrupt_state"),
		zap.String("key", c.cfg.Keys.State(session)), zap.String("problem", problem))
}
