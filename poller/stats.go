package poller

import (
	"fmt"
	"math"

	"go.uber.org/zap"
)

// PollStats is what the poll scheduler reports: cheap to read (no lease
// list), for metrics.
type PollStats struct {
	// Running and Waiting are the polls running now and those due but
	// waiting for a slot (PollLimit, or a slot of their host).
	Running, Waiting int
	// PollLimit is how many polls may run at once now (0: no limit):
	// Config.MaxPolls, lower while the CPU is the bound — the process has
	// more goroutines ready to run than processors — so that due polls
	// wait in order of due time rather than crowd the CPU.
	PollLimit int
	// Deferred and Late count, since start, the polls that waited for a
	// slot and those that started later than a tenth of their interval
	// after they were due.
	Deferred, Late int64
	// GroupWaits counts, since start, the polls that waited for a slot of
	// their group (PollGroup: the HTTP poller's host and --max-per-host)
	// because as many of the group's polls ran, not because the limit
	// held the group's slots.
	GroupWaits int64
	// Backoff is the number of sessions backing off after failed polls,
	// counted now among the poll loops running here.
	Backoff int
	// LeasesHeld is the number of leases this worker holds (lease.Held)
	// with a running poll loop, counted now.
	LeasesHeld int
	// PlannedWeight is the weight this worker's heartbeat carries, which
	// its peers plan with: Config.Weight (1 when 0), lower while the
	// worker sheds load after staying behind (Config.KeepWeightWhenBehind).
	PlannedWeight float64
	// Behind reports a worker that cannot keep up with its share: over
	// the last 4 s it ran fewer than 90 % of the polls its sessions were
	// due (DueRate, AchievedRate; it clears at 95 %), or a poll has waited
	// for a slot longer than max(1s, its interval). Polls wait for slots
	// in order of due time, so every session's polls wait about as long
	// past their due time (Overload says how long): none is starved, and
	// one with a short interval slows the most. A worker behind needs more room
	// (BehindReason says which) or fewer sessions; it sheds load to its
	// peers (Config.KeepWeightWhenBehind). Ready does not include it (see
	// Ready).
	Behind bool
	// BehindReason says what holds the polls back while Behind:
	// BehindHostLimit, BehindMaxPolls or BehindCPU.
	BehindReason string
	// BehindHost is, with BehindHostLimit, the host (GroupLimiter's group)
	// with the most polls waiting for a slot.
	BehindHost string
	// DueRate and AchievedRate are the polls per second the held sessions
	// were due and those run, over the last 4 s (see Behind).
	DueRate, AchievedRate float64
	// Skipped counts the polls the Poller did not send for want of a
	// local resource (ErrNoCapacity), since start: not failures.
	Skipped int64
	// Stalls counts, since start, the times this worker found itself
	// stopped or starved (a poll's timer firing more than 750 ms late) and
	// held its polls until it had read the sessions again.
	Stalls int64
}

// Overload describes in one line why the worker is behind ("" when it
// keeps up): the reason, with the host for BehindHostLimit, the polls it
// runs of those due, and how much less often than its interval each
// session is polled (due/achieved: the heaps of waiting polls share the
// slots in proportion to the sessions' rates, pollloop.go), e.g.
// "host-limit (host 127.0.0.1:8080): runs 2950 of 6000 polls/s due; each
// session is polled about every 2.03 intervals".
func (s PollStats) Overload() string {
	if !s.Behind {
		return ""
	}
	why := s.BehindReason
	if s.BehindReason == BehindHostLimit && s.BehindHost != "" {
		why += " (host " + s.BehindHost + ")"
	}
	if s.AchievedRate <= 0 {
		return why + ": polls wait for a slot longer than their interval"
	}
	return fmt.Sprintf("%s: runs %.0f of %.0f polls/s due; each session is polled about every %.2f intervals",
		why, s.AchievedRate, s.DueRate, s.Slowdown())
}

// Slowdown is how many intervals apart each session is polled while the
// worker is behind: due/achieved, at least 1 (1 when nothing is achieved
// or due).
func (s PollStats) Slowdown() float64 {
	if s.AchievedRate <= 0 || s.DueRate <= 0 {
		return 1
	}
	return max(1, s.DueRate/s.AchievedRate)
}

// logBehind logs a change of ps.Behind or of its reason, or of its
// slowdown (behindNews).
func logBehind(log *zap.Logger, ps PollStats, maxPolls int) {
	fields := []zap.Field{zap.Float64("due_per_second", round1(ps.DueRate)), zap.Float64("achieved_per_second", round1(ps.AchievedRate)),
		zap.Int("running", ps.Running), zap.Int("waiting", ps.Waiting), zap.Int64("deferred", ps.Deferred), zap.Int64("late", ps.Late)}
	if !ps.Behind {
		log.Info("caught up: this worker runs the polls its sessions are due again", fields...)
		return
	}
	fields = append(fields, zap.String("reason", ps.BehindReason), zap.Float64("polled_every_intervals", math.Round(ps.Slowdown()*100)/100))
	switch ps.BehindReason {
	case BehindHostLimit:
		fields = append(fields, zap.String("host", ps.BehindHost))
	case BehindMaxPolls:
		fields = append(fields, zap.Int("max_polls", maxPolls))
	case BehindCPU:
		fields = append(fields, zap.Int("poll_limit", ps.PollLimit), zap.Int("max_polls", maxPolls))
	}
	log.Warn("behind: this worker cannot keep up with its share; every session is polled less often alike, "+
		"every polled_every_intervals intervals (due/achieved; logged again when that moves by a quarter); if it stays behind and has peers, it hands them load (--shed-when-behind)", fields...)
}

// round1 rounds x to one decimal, for logs.
func round1(x float64) float64 { return math.Round(x*10) / 10 }

// pollStatsOf is PollStats from the scheduler's figures st and the
// planned weight; without countLoops, Backoff and LeasesHeld are left at
// 0 (st did not count them).
func pollStatsOf(st schedStats, planned float64, countLoops bool) PollStats {
	ps := PollStats{Running: st.Running, Waiting: st.Waiting, PollLimit: st.Limit, Deferred: st.Deferred, Late: st.Late, GroupWaits: st.GroupWaits,
		Behind: st.Behind.Behind, BehindReason: st.Behind.Reason, BehindHost: st.Behind.Group,
		DueRate: st.Behind.Due, AchievedRate: st.Behind.Done, Skipped: st.Skipped, Stalls: st.Stalls,
		PlannedWeight: planned}
	if countLoops {
		ps.LeasesHeld, ps.Backoff = st.Held, st.Backoff
	}
	return ps
}
