package poller

import (
	"slices"
	"time"

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
// span its behind span; room: a peer keeps up, peersWithRoom) and reports
// whether it changed: down by shedStep (to no less than shedFloor) once
// the worker has been behind a whole span since the last change and a
// peer has room, up by recoverStep (to 1) after recoverSpans spans
// without being behind. While every peer is behind too nothing is shed:
// a lower weight would only move sessions between workers that cannot
// poll them either, and each move is a handoff (workers step on their own
// clocks, so their relative weights would swing).
func (s *shedding) step(now time.Time, behind, room bool, span time.Duration) (fraction float64, changed bool) {
	if s.fraction == 0 {
		s.fraction, s.changedAt = 1, now
	}
	if behind != s.behind {
		s.behind, s.changedAt = behind, now // each stretch is timed from its start
	}
	switch {
	case behind && room && s.fraction > shedFloor && now.Sub(s.changedAt) >= span:
		s.fraction, s.changedAt = max(shedFloor, s.fraction*shedStep), now
		return s.fraction, true
	case !behind && s.fraction < 1 && now.Sub(s.changedAt) >= recoverSpans*span:
		s.fraction, s.changedAt = min(1, s.fraction+recoverStep), now
		return s.fraction, true
	}
	return s.fraction, false
}

// peersWithRoom reports whether a placeable member other than me keeps up
// (its heartbeat info says nothing of being behind, nodes.Info.Behind, or
// there is none yet: a worker just started has room): shedding moves load
// only to such peers.
func peersWithRoom(me string, placeable []string, infos []nodes.Info) bool {
	for _, id := range placeable {
		if id == me {
			continue
		}
		i := slices.IndexFunc(infos, func(info nodes.Info) bool { return info.ID == id })
		if i < 0 || infos[i].Behind == "" {
			return true
		}
	}
	return false
}
