package httppoll

import (
	"sync"
)

// DefaultChangesMemory is the default of Config.ChangesMemory.
const DefaultChangesMemory = 100_000

// outcome is what RecordChanges compares between two polls of a session.
type outcome struct {
	token  int64
	status int
	class  errClass
}

// changes remembers the last recorded outcome of at most max sessions
// (about 60 bytes each plus the id, which is shared with the session's
// definition). When full, a new session evicts an arbitrary one (Go's map
// iteration order), whose next poll is then recorded as if it were new: the
// memory costs extra entries, never a missed change. The token is part of
// the outcome, so the first poll under a new lease is always recorded: a
// session that moves to another worker and back shows both moves.
type changes struct {
	max int

	mu   sync.Mutex
	last map[string]outcome
}

func newChanges(max int) *changes {
	return &changes{max: max, last: make(map[string]outcome)}
}

// changed records o as session's last outcome and reports whether it
// differs from the one before (true for a session it does not remember).
func (c *changes) changed(session string, o outcome) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, ok := c.last[session]
	if ok && prev == o {
		return false
	}
	if !ok && len(c.last) >= c.max {
		for k := range c.last {
			delete(c.last, k)
			break
		}
	}
	c.last[session] = o
	return true
}
