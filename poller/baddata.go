package poller

import (
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
)

// badData remembers the bad records this worker has reported, so that
// each is logged and counted once, not at every read. Safe for concurrent
// use (poll goroutines report states).
type badData struct {
	log  *zap.Logger
	obs  Observer
	keys keyspace.Space

	mu     sync.Mutex
	states map[string]string // session -> problem of its corrupt state, as reported

	members map[string]struct{} // junk members of the node index reported and still seen; the main loop's only
	buckets map[int]struct{}    // index buckets of the wrong type reported and not read well since; the main loop's only
}

// noteBuckets reports, once each until read well again, the index buckets
// among read whose key has the wrong type (bad: read as empty, so that
// the sessions of that bucket alone go unpolled). Called from the main
// loop.
func (b *badData) noteBuckets(read, bad []int) {
	if len(bad) == 0 && len(b.buckets) == 0 {
		return
	}
	for _, bk := range read {
		if !slices.Contains(bad, bk) {
			delete(b.buckets, bk)
		}
	}
	for _, bk := range bad {
		if _, reported := b.buckets[bk]; reported {
			continue
		}
		if b.buckets == nil {
			b.buckets = make(map[int]struct{})
		}
		b.buckets[bk] = struct{}{}
		b.obs.BadData(BadDataBucket)
		b.log.Error("session index bucket of the wrong type: read as empty, its sessions are not polled; pollworker never deletes it: delete or rename the key, then pollworker sessions apply the sessions again",
			zap.String("event", "bad_bucket"), zap.String("key", b.keys.SessionBucket(bk)))
	}
}

// noteState reports, once per session and problem, that session's saved
// state was corrupt (problem) and read as never saved; a readable state
// (problem "") lets it be reported again later.
func (b *badData) noteState(session, problem string) {
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
	b.obs.BadData(BadDataState)
	b.log.Error("saved state of the session is corrupt: polling it as never saved; the next save overwrites it (copy the key now to keep it)",
		zap.String("session", session), zap.String("event", "corrupt_state"),
		zap.String("key", b.keys.State(session)), zap.String("problem", problem))
}

// noteJunk reports, once each, the junk members of the node index (entries
// that are not live workers: nodes.Membership.Junk) seen by both the
// previous and this membership read, so that a worker caught between
// deleting its heartbeat key and its index entry (leaving) is not
// reported; a member reported again only after it was gone. Junk is ignored
// by the planning whether reported or not. Called from the main loop.
func (b *badData) noteJunk(prev, cur []nodes.Junk) {
	if len(cur) == 0 {
		b.members = nil
		return
	}
	before := make(map[string]struct{}, len(prev))
	for _, j := range prev {
		before[j.Member] = struct{}{}
	}
	next := make(map[string]struct{}, len(cur))
	for _, j := range cur {
		if _, reported := b.members[j.Member]; reported {
			next[j.Member] = struct{}{}
			continue
		}
		if _, seen := before[j.Member]; !seen {
			continue
		}
		next[j.Member] = struct{}{}
		b.obs.BadData(BadDataMember)
		b.log.Error("node index entry ignored: not a live worker; remove it with pollworker forget",
			zap.String("event", "junk_member"), zap.String("member", truncate(j.Member, 64)),
			zap.Int("member_bytes", len(j.Member)), zap.String("problem", j.Problem))
	}
	b.members = next
}

// truncate is s cut to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
