package poller

import (
	"time"

	"go.uber.org/zap"
)

// maxClockSkew is how far this worker's wall clock may be from Redis's
// before the worker warns. Leases do not depend on it (their deadlines
// count monotonic time from Redis replies), but a scheduled session's
// slots start on the holder's wall clock, and the times the worker
// reports (results, the status page) are its own.
const maxClockSkew = 2 * time.Second

// clockSkew is what a worker last concluded of its wall clock against
// Redis's (noteClock).
type clockSkew struct {
	off    bool          // warned: off by more than maxClockSkew
	warned time.Duration // the skew of the last warning
}

// skewOf is how far local is ahead of server (negative: behind), read
// between before and after (a request whose reply carried server, in
// Unix ms), and the uncertainty of that: half the round trip, plus the
// millisecond server was truncated to.
func skewOf(before, after time.Time, serverMs int64) (skew, uncertainty time.Duration) {
	rtt := after.Sub(before)
	local := before.Add(rtt / 2)
	return local.Sub(time.UnixMilli(serverMs)), rtt/2 + time.Millisecond
}

// judge decides from a skew measured with its uncertainty whether the
// clock is off (surely further than maxClockSkew) or back in step (surely
// within half of it), and whether to log: once on going off, again when
// it moved by another maxClockSkew since, and once on coming back.
func (c clockSkew) judge(skew, uncertainty time.Duration) (next clockSkew, warn, back bool) {
	abs := skew.Abs()
	switch {
	case !c.off && abs-uncertainty > maxClockSkew:
		return clockSkew{off: true, warned: skew}, true, false
	case c.off && abs+uncertainty < maxClockSkew/2:
		return clockSkew{}, false, true
	case c.off && (skew-c.warned).Abs()-uncertainty > maxClockSkew:
		return clockSkew{off: true, warned: skew}, true, false
	}
	return c, false, false
}

// noteClock compares this worker's wall clock with the Redis time of a
// membership read made between before and after, and logs when it goes
// off, moves further, or comes back (clockSkew.judge).
func (v *view) noteClock(before, after time.Time, serverMs int64) {
	if serverMs <= 0 {
		return
	}
	skew, uncertainty := skewOf(before, after, serverMs)
	next, warn, back := v.clockSkew.judge(skew, uncertainty)
	v.clockSkew = next
	switch {
	case warn:
		v.log.Warn("this worker's wall clock differs from Redis's: scheduled sessions start their slots on this clock, and the times it reports are its own; leases are not affected. Synchronise the clocks (NTP)",
			zap.Duration("ahead_of_redis", skew), zap.Duration("uncertainty", uncertainty), zap.Duration("max", maxClockSkew))
	case back:
		v.log.Info("this worker's wall clock agrees with Redis's again", zap.Duration("ahead_of_redis", skew))
	}
}
