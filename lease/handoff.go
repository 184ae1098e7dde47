package lease

import (
	"time"

	"github.com/pollworker/pollworker/keyspace"
)

// handoffKey is the handoff mark of session: release.lua sets it to the
// release time (Redis TIME, ms) when it deletes a lease, with a lifetime of
// one TTL, and acquire.lua consumes it on the next fresh acquisition to
// report the gap. It is <prefix>:released:{<session>}, built like
// keyspace.Space.Lease so that it shares the lease's hash slot.
func handoffKey(keys keyspace.Space, session string) string {
	prefix := keys.Prefix
	if prefix == "" {
		prefix = keyspace.DefaultPrefix
	}
	return prefix + ":released:{" + session + "}"
}

// HandoffGap returns how long the session had no lease before this
// acquisition when its previous holder released it gracefully: the time
// from that release to this acquisition, both read from the Redis server's
// clock. ok is false when there was no such release: a first acquisition,
// a previous lease that expired (crash, lost connection), a release older
// than one TTL, or an acquisition whose first reply was lost and retried.
func (l *Lease) HandoffGap() (gap time.Duration, ok bool) {
	return l.gap, l.gap >= 0
}

// Acquired is the local (monotonic) instant at which the reply of this
// acquisition arrived.
func (l *Lease) Acquired() time.Time { return l.acquired }

// MarkPolled records that a poll is starting under the lease and reports
// whether it is the first, so that a measurement of the first poll is made
// once per lease even if its poll loop is restarted.
func (l *Lease) MarkPolled() (first bool) { return l.polled.CompareAndSwap(false, true) }
