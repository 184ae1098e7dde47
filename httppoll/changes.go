package httppoll

import "sync"

// DefaultChangesMemory is the default of Config.ChangesMemory.
const DefaultChangesMemory = 100_000

// outcome is what a change of a session's response is judged on
// (changeOf): the status (a 304 as the 200 it revalidates), the class of
// failure, the ETag and the 2xx body's hash.
type outcome struct {
	status     int
	class      string
	etag, body string
}

// changes remembers the last outcome of at most max sessions polled
// without saved state (about 200 bytes each plus the id, which is shared
// with the session's definition), to tell whether their response changed.
// When full, a new session evicts an arbitrary one (Go's map iteration
// order), whose next poll then counts as a change: the memory costs extra
// changes, never a missed one. With saved state (Turn.State) the saved
// State is compared instead, across handoffs.
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
