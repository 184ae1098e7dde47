package poller

import (
	"context"
	"time"

	"github.com/pollworker/pollworker/schedule"
)

// The reasons of Observer.SlotsSkipped.
const (
	SkipOverlap = "overlap"
	SkipCatchUp = "catchup"
)

// slotLoop is the schedule of a scheduled session's poll loop: the worker's
// next poll time (pollLoop.next) is the start of the next slot to decide,
// and each turn decides with schedule.Decide which slot, if any, runs.
// Its fields are used by the runner of the loop's turn only (turns.turn, then
// scheduler.record, in that goroutine), one turn at a time.
type slotLoop struct {
	sch     *schedule.Schedule // nil when the schedule does not parse (never polled)
	policy  schedule.Policy
	window  time.Duration
	since   time.Time // the loop's start: a session new to the fleet (nothing recorded, or a cut) runs no slot due before it, under every policy
	through time.Time // the cursor: slots at or before it were run or skipped
	known   bool      // the saved slots were read (or there is no state store)
	ran     time.Time // the slot the turn's poll ran, zero when it ran none
	before  time.Time // the cursor before that slot: put back when its poll was cut short
	began   time.Time // when that poll began
	wake    time.Time // when to decide again, set by the turn
	report  func(n int, reason string)
}

// next returns when w's loop decides again after its turn, at now: at the
// start of the next slot; at once when policy all has missed slots left.
// Slots that came due while the turn's poll ran are skipped (overlap):
// never run beside it, nor late after it. A poll cut short (cancelled:
// its lease ended, or a drain aborted it) leaves its slot undone: the
// cursor goes back before it and the loop's next poll time, which a
// successor keeps, is that slot's start.
func (sl *slotLoop) next(now time.Time, cut bool) time.Time {
	if sl.sch == nil {
		return sl.wake
	}
	if !sl.ran.IsZero() && cut {
		sl.through, sl.wake = sl.before, sl.sch.Start(sl.ran)
		sl.ran = time.Time{}
		return sl.wake
	}
	if !sl.ran.IsZero() {
		pending := sl.sch.Next(sl.through)
		if sl.policy == schedule.All && !pending.IsZero() && !sl.sch.Start(pending).After(sl.began) {
			return now // missed slots due before the poll began: run them in order
		}
		d := sl.sch.Decide(schedule.Cursor{Through: sl.through, Running: true}, schedule.Input{Now: now, Policy: sl.policy, Window: sl.window})
		sl.report(d.Skipped, SkipOverlap)
		sl.through, sl.wake = d.Through, d.Wake
		sl.ran = time.Time{}
		if sl.wake.IsZero() {
			sl.wake = now.Add(24 * time.Hour)
		}
	}
	if sl.wake.IsZero() {
		return now.Add(time.Second) // the turn did not get to decide (a failed state load): try again soon
	}
	return sl.wake
}

type slotKey struct{}

// SlotOf returns the slot a poll runs for, when its session is scheduled:
// the coordinator puts it in the poll's context. The built-in HTTP poller
// sends it as X-Poll-Slot, so that a target can make each slot's effect
// happen once.
func SlotOf(ctx context.Context) (slot time.Time, ok bool) {
	slot, ok = ctx.Value(slotKey{}).(time.Time)
	return slot, ok
}
