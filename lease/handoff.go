package lease

import "time"

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

// NextPoll returns when the session's next poll was due on its previous
// holder's schedule, on this worker's clock, when that holder handed the
// lease over gracefully (Manager.HandOff) and said so; ok is false
// otherwise. The time may have passed already (the poll is overdue). The
// instant crosses workers through the Redis server's clock, so the two
// workers' clocks need not agree.
func (l *Lease) NextPoll() (at time.Time, ok bool) {
	if l.nextPollIn < 0 {
		return time.Time{}, false
	}
	return l.acquired.Add(l.nextPollIn), true
}

// NextPollWithin is NextPoll, but no later than limit after this
// acquisition: a successor keeps its predecessor's schedule only as far as
// the session's own interval reaches, so that a due time pushed out by an
// error backoff, or recorded for another definition of the session (one
// removed and added again, or changed, while a holder still released it
// under the old one), never holds the first poll back longer than that.
func (l *Lease) NextPollWithin(limit time.Duration) (at time.Time, ok bool) {
	at, ok = l.NextPoll()
	if bound := l.acquired.Add(max(limit, 0)); ok && at.After(bound) {
		at = bound
	}
	return at, ok
}
