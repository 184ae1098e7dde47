package poller

import (
	"time"
)

// Shedding: a worker that stays behind lowers the weight its heartbeat
// carries, so that its peers plan less for it and take over the rest, and
// raises it back slowly once it keeps up (additive-increase,
// multiplicative-decrease on the advertised weight, as TCP on a window).
const (
	// shedStep multiplies the planned weight once per behind span (the
	// lease TTL) while the worker is behind.
	shedStep = 0.75
	// shedFloor is the lowest fraction of its Weight a worker sheds to.
	shedFloor = 0.25
	// recoverStep is added to the fraction once per recoverSpans behind
	// spans without being behind, up to 1.
	recoverStep = 0.1
	// recoverSpans is how many behind spans a worker keeps up before each
	// recoverStep: slow, so that a worker just below its capacity probes it
	// gently rather than take back what it shed and fall behind again.
	recoverSpans = 10
)

// shedding is the fraction of its Weight a worker advertises.
type shedding struct {
	fraction  float64   // 1 when nothing is shed
	changedAt time.Time // when fraction last changed, or behind last began
	behind    bool      // behind at the last step
}

// step moves the fraction for the worker's state now (behind or not, with
// span its behind span) and reports whether it changed: down by shedStep
// (to no less than shedFloor) once the worker has been behind a whole span
// since the last change, up by recoverStep (to 1) after recoverSpans spans
// without being behind.
func (s *shedding) step(now time.Time, behind bool, span time.Duration) (fraction float64, changed bool) {
	if s.fraction == 0 {
		s.fraction, s.changedAt = 1, now
	}
	if behind != s.behind {
		s.behind, s.changedAt = behind, now // each stretch is timed from its start
	}
	switch {
	case behind && s.fraction > shedFloor && now.Sub(s.changedAt) >= span:
		s.fraction, s.changedAt = max(shedFloor, s.fraction*shedStep), now
		return s.fraction, true
	case !behind && s.fraction < 1 && now.Sub(s.changedAt) >= recoverSpans*span:
		s.fraction, s.changedAt = min(1, s.fraction+recoverStep), now
		return s.fraction, true
	}
	return s.fraction, false
}
