package poller

import "time"

// behindMinLate is the least lateness that counts toward being behind.
const behindMinLate = time.Second

// behindLate is how late a poll of the given interval must start, or still
// be waiting to start, to count toward being behind: max(1s, interval/10).
// Below it a worker is merely late (schedStats.Late); a burst of first
// polls after an acquisition, a GC pause or a slow round stays under it.
func behindLate(interval time.Duration) time.Duration {
	return max(behindMinLate, interval/10)
}

// lateness follows the stretches of time during which a worker's polls keep
// starting, or waiting to start, more than behindLate after they were due.
// A stretch begins when the first such poll became that late; it goes on
// while others follow within behindLate of the last one's start, or while
// the oldest poll waiting for a slot is that late; it ends at a poll that
// starts in time while no other poll waits for a slot. The scheduler
// reports the worker behind once the current stretch has lasted its window
// (Config.LeaseTTL). The zero value is a worker that keeps up.
type lateness struct {
	since time.Time // when the current stretch began; zero when none
	until time.Time // the evidence of the stretch reaches this far
}

// started records a poll due at `at` that starts at now; queued says
// whether other due polls wait for a slot.
func (l *lateness) started(at, now time.Time, interval time.Duration, queued bool) {
	bound := behindLate(interval)
	from := at.Add(bound) // when this poll became that late
	if !now.After(from) {
		if !queued {
			*l = lateness{}
		}
		return
	}
	l.extend(from, now.Add(bound))
}

// extend adds evidence of lateness from `from` to `to`: it continues the
// current stretch if it reaches back into it, and starts a new one after
// a gap.
func (l *lateness) extend(from, to time.Time) {
	if l.since.IsZero() || from.After(l.until) {
		l.since, l.until = from, to
		return
	}
	if from.Before(l.since) {
		l.since = from
	}
	if to.After(l.until) {
		l.until = to
	}
}

// behindFor returns how long the current stretch has lasted at now (0 when
// there is none), counting the oldest poll waiting for a slot, due at
// `due` with the given interval, if waiting is true.
func (l lateness) behindFor(now time.Time, waiting bool, due time.Time, interval time.Duration) time.Duration {
	if waiting {
		if from := due.Add(behindLate(interval)); now.After(from) {
			l.extend(from, now)
		}
	}
	if l.since.IsZero() || now.After(l.until) {
		return 0
	}
	return now.Sub(l.since)
}
