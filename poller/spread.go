package poller

import (
	"time"

	"github.com/pollworker/pollworker/hrw"
)

// When polls start: the timer's slack, the spread of polls over their
// interval, the backoff of failing sessions, and the first poll's bound.

// TimerSlack is how late a Coordinator may start a poll after it is due
// (scheduler.slack): up to 2 ms (a hundredth of the shortest interval the
// worker has polled, when that is less), and every poll due by then starts
// with it. Measured with one worker polling 1,000 sessions at 1 s, where
// polls come ~1 ms apart, firing once per poll cost about a third more CPU
// per poll than firing once per 2 ms: each firing wakes the process from
// idle (a timer, a thread, the runtime's sysmon). As Linux's timer slack
// and systemd's AccuracySec do, it trades a little punctuality for fewer
// wake-ups; polls still keep to their grid (the next is due one interval
// after this one was due, not after it started).
const TimerSlack = 2 * time.Millisecond

// One turn of a poll loop, top to bottom: the timer finds it due (fire),
// settleLocked and takeSlotsLocked admit it (schedule.go), a runner
// runs it (run → turn: the owner's Turn hook loads the state and polls),
// polled records its outcome, and nextDue says when the next turn is due.

// runnerIdle is how long a runner waits for another poll before it exits.
const runnerIdle = time.Second

// Pacing of first polls without a schedule to keep (paceLocked).
const (
	// firstPollGap is the least time between two paced first polls: at
	// most 4 start per millisecond.
	firstPollGap = 250 * time.Microsecond
	// maxFirstPollDelay bounds how late pacing makes a first poll (and
	// half the session's interval, if less).
	maxFirstPollDelay = 500 * time.Millisecond
)

// SpreadStep spreads the polls of sessions with the same interval evenly
// over it, as Prometheus spreads scrapes: each session's phase within its
// interval is a hash of its id (the same on every worker, so a handoff
// keeps it), and a poll due at next that is off its phase is moved later
// by SpreadStep(id, interval, next), at most interval/10. Polls are never
// moved earlier, so no interval is shortened; sessions acquired together
// (a start, a crash takeover, all of them after a Redis data loss) are on
// their phases within about ten polls, whatever the interval. (The step
// was capped at 200 ms before: 100k sessions at 1 min, started together,
// kept polling in one burst a minute, behind for 20 s of every 60, for
// hours.) A session on its phase is not moved: a handoff's successor
// polls at the due time the old holder handed over, step included.
func SpreadStep(id string, interval time.Duration, next time.Time) time.Duration {
	if interval <= 0 {
		return 0
	}
	iv := int64(interval)
	phase := int64(hrw.Bucket(id, int(iv)))
	late := ((phase-next.UnixNano())%iv + iv) % iv // until the next instant on its phase
	return time.Duration(min(late, int64(maxSpreadStep(interval))))
}

// maxSpreadStep is the most SpreadStep lengthens one interval.
func maxSpreadStep(interval time.Duration) time.Duration { return interval / 10 }

// ErrorBackoff is how much longer than interval a session waits for its
// next poll after failures consecutive failed polls, before jitter:
// (2^min(failures,5) - 1) × interval, at most max; 0 after none or when
// max is not positive (backoff off). The scheduler takes up to a tenth off
// or adds it, from a hash of the session and the count.
func ErrorBackoff(failures int, interval, max time.Duration) time.Duration {
	if failures <= 0 || max <= 0 {
		return 0
	}
	return min(time.Duration((1<<min(failures, 5))-1)*interval, max)
}

// FirstPollBound is how long after an acquisition of a session polled
// every interval its first poll may wait to keep the previous holder's
// schedule (the handoff mark): one interval and the spread step, as far
// ahead as a holder's next poll is unless it backs off (a new holder
// starts its backoff afresh).
func FirstPollBound(interval time.Duration) time.Duration {
	return interval + maxSpreadStep(interval)
}
