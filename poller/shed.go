package poller

import (
	"time"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/nodes"
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

// shed sets why the worker is behind in its next heartbeat (nodes.Info.Behind,
// which status shows), steps c's shedding with whether it is behind now
// and, on a change, sets the weight its next heartbeat carries. Called
// from the heartbeat loop, before each heartbeat.
func (c *Coordinator) shed() {
	if err := c.registry.SetBehind(c.PollStats().Overload()); err != nil {
		c.log.Error("behind not published", zap.Error(err))
	}
	if c.cfg.KeepWeightWhenBehind {
		return
	}
	st := c.sched.Stats(false)
	fraction, changed := c.shedding.step(c.cfg.Clock.Now(), st.Behind.Behind, c.cfg.LeaseTTL)
	if !changed {
		return
	}
	base := nodes.Info{Weight: c.cfg.Weight}.PlanWeight() // 0 means 1
	w := max(base*fraction, 0.001)                        // the least weight nodes.ValidateWeight takes
	if err := c.registry.SetWeight(w); err != nil {
		c.log.Error("planned weight not changed", zap.Float64("weight", w), zap.Error(err))
		return
	}
	if st.Behind.Behind {
		c.log.Warn("behind: shedding load to the other workers", zap.Float64("planned_weight", w), zap.Float64("weight", base),
			zap.String("reason", st.Behind.Reason))
		return
	}
	c.log.Info("keeping up: taking load back", zap.Float64("planned_weight", w), zap.Float64("weight", base))
}
