package poller

import (
	"time"
)

// A worker is behind when its sessions are due more polls than it runs.
// The scheduler measures both over a sliding window (pollMeter): each poll
// that ran counts as done, and as due one poll plus the time it began
// after it would have begun if the worker kept up (its previous poll's
// start + its interval, or that poll's end when it overran the interval),
// in intervals. A worker that keeps up is due one poll per poll it runs;
// one whose sessions are each polled every 2 intervals is due two. A slow
// target (a poll overrunning its interval) and a lease in doubt (the poll
// waits for the lease, not for the worker) make nobody behind.
//
// Polls waiting for a slot share the slots in proportion to the
// sessions' rates (fairKey), so that an overloaded worker slows every
// session alike: each session's gap is about interval × due/achieved, the
// figures reported (behindReport).

// Reasons a worker is behind (PollStats.BehindReason).
const (
	// BehindHostLimit: polls wait for a slot of their host (GroupLimiter,
	// httppoll's MaxPerHost); PollStats.BehindHost names the host with the
	// most polls waiting.
	BehindHostLimit = "host-limit"
	// BehindMaxPolls: polls wait for one of Config.MaxPolls's slots.
	BehindMaxPolls = "max-polls"
	// BehindCPU: the process cannot run the polls due in time (CPU, or
	// the Go runtime): they start late without waiting for a slot, or
	// wait for the limit of polls at once lowered while the CPU is busy
	// (PollStats.PollLimit below Config.MaxPolls).
	BehindCPU = "cpu"
)

const (
	// meterBucket is the step of the meter's sliding window.
	meterBucket = 500 * time.Millisecond
	// meterBuckets is the number of steps in the window: behindWindow.
	meterBuckets = 8
	// behindWindow is how far back the meter looks: a worker falling
	// behind at twice what it achieves is reported within about half of
	// it, one that catches up within about a bucket.
	behindWindow = meterBuckets * meterBucket
	// behindEnter is the achieved/due ratio under which a worker becomes
	// behind; behindLeave the ratio at or above which it stops being
	// (hysteresis, so that a worker at its capacity does not flap).
	behindEnter = 0.9
	behindLeave = 0.95
	// behindEvidence is the least number of polls in the window that
	// judges: fewer say nothing about the worker's capacity.
	behindEvidence = 8
	// maxLateAllowance bounds lateAllowance.
	maxLateAllowance = 100 * time.Millisecond
)

// lateAllowance is how late a poll of the given interval may begin without
// counting toward being behind (timer slack, a GC pause, a runner starting
// under load): a tenth of the interval, at most maxLateAllowance. It does
// not change the due rate reported.
func lateAllowance(interval time.Duration) time.Duration {
	return min(interval/10, maxLateAllowance)
}

// owed returns how many polls a poll that began lag after it would have
// begun if the worker kept up stands for: 1 plus lag in intervals (due),
// and the same less the lateAllowance (judged, which decides behind).
func owed(lag, interval time.Duration) (due, judged float64) {
	if interval <= 0 {
		return 1, 1
	}
	due, judged = 1, 1
	if lag > 0 {
		due += float64(lag) / float64(interval)
	}
	if lag -= lateAllowance(interval); lag > 0 {
		judged += float64(lag) / float64(interval)
	}
	return due, judged
}

// waitKind is what a poll waited for.
type waitKind uint8

const (
	waitSlot  waitKind = iota // one of the limit's slots (Config.MaxPolls)
	waitGroup                 // a slot of its group (GroupLimiter)
	waitCPU                   // one of the limit's slots, lowered for the CPU (cpuLimit)
)

// reason is the reason a worker whose polls wait for this is behind.
func (k waitKind) reason() string {
	switch k {
	case waitGroup:
		return BehindHostLimit
	case waitCPU:
		return BehindCPU
	}
	return BehindMaxPolls
}

// meterCounts are the counts of one step of the meter, or of the window.
type meterCounts struct {
	due, judged float64 // polls due (owed), and due less the lateness allowed
	done        int     // polls run
	slotWaits   int     // polls that waited for one of the limit's slots
	groupWaits  int     // polls that waited for a slot of their group
	cpuWaits    int     // polls that waited for one of the limit's slots, lowered for the CPU
}

func (c *meterCounts) add(o meterCounts) {
	c.due += o.due
	c.judged += o.judged
	c.done += o.done
	c.slotWaits += o.slotWaits
	c.groupWaits += o.groupWaits
	c.cpuWaits += o.cpuWaits
}

// judgeBehind decides whether a worker is behind from its window's counts,
// given whether it was: with enough evidence, when it ran less than
// behindEnter of the polls due (judged), and it stays behind until it runs
// behindLeave of them. stuck (a poll has waited for a slot longer than
// oldestWaitBound) makes it behind whatever the counts.
func judgeBehind(c meterCounts, was, stuck bool) bool {
	if stuck {
		return true
	}
	if c.done < behindEvidence || c.judged <= 0 {
		return false
	}
	ratio := float64(c.done) / c.judged
	if was {
		return ratio < behindLeave
	}
	return ratio < behindEnter
}

// behindReason names what held the polls of a window back: the limit most
// polls waited for (the CPU for the limit lowered for it), or the CPU when
// fewer than one poll in ten waited for a slot.
func behindReason(c meterCounts) string {
	switch {
	case (c.slotWaits+c.groupWaits+c.cpuWaits)*10 < c.done:
		return BehindCPU
	case c.cpuWaits >= c.slotWaits && c.cpuWaits >= c.groupWaits:
		return BehindCPU
	case c.groupWaits >= c.slotWaits:
		return BehindHostLimit
	default:
		return BehindMaxPolls
	}
}

// oldestWaitBound is how long a poll may wait for a slot before the worker
// is behind whatever its counts (judgeBehind's stuck): polls that wait
// that long may return too seldom to count.
func oldestWaitBound(interval time.Duration) time.Duration {
	return max(time.Second, interval)
}

// pollMeter counts, over a sliding window of meterBuckets steps, the polls
// due and those run (see the top of this file). The zero value is empty.
type pollMeter struct {
	first   time.Time // the first record: the window is shorter before first + behindWindow
	at      time.Time // when buckets[cur] began
	cur     int
	buckets [meterBuckets]meterCounts
	judgeAt time.Time // the next judgement outside snapshots (scheduler.judgeLocked)
}

// advance moves the window to now.
func (m *pollMeter) advance(now time.Time) {
	switch {
	case m.at.IsZero():
		m.first, m.at = now, now
	case now.Sub(m.at) >= behindWindow:
		m.buckets, m.cur, m.at = [meterBuckets]meterCounts{}, 0, now
	}
	for now.Sub(m.at) >= meterBucket {
		m.cur = (m.cur + 1) % meterBuckets
		m.buckets[m.cur] = meterCounts{}
		m.at = m.at.Add(meterBucket)
	}
}

// polled counts a poll run at now that stood for `due` (and judged) polls.
func (m *pollMeter) polled(now time.Time, due, judged float64) {
	m.advance(now)
	b := &m.buckets[m.cur]
	b.due += due
	b.judged += judged
	b.done++
}

// waited counts a poll that began waiting for a slot at now.
func (m *pollMeter) waited(now time.Time, kind waitKind) {
	m.advance(now)
	switch kind {
	case waitGroup:
		m.buckets[m.cur].groupWaits++
	case waitCPU:
		m.buckets[m.cur].cpuWaits++
	default:
		m.buckets[m.cur].slotWaits++
	}
}

// window returns the counts of the window ending at now and how long it
// spans (shorter in the first behindWindow).
func (m *pollMeter) window(now time.Time) (c meterCounts, span time.Duration) {
	m.advance(now)
	for _, b := range m.buckets {
		c.add(b)
	}
	span = min(behindWindow-meterBucket+now.Sub(m.at), now.Sub(m.first))
	return c, span
}

// behindReport is the scheduler's judgement of whether the worker keeps
// up (PollStats).
type behindReport struct {
	Behind bool
	Reason string  // why, when Behind: BehindHostLimit, BehindMaxPolls or BehindCPU
	Group  string  // with BehindHostLimit: the group (host) with the most polls waiting
	Due    float64 // polls due per second over the window
	Done   float64 // polls run per second over the window
}
