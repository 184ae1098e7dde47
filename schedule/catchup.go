package schedule

import (
	"fmt"
	"time"
)

// Policy says which missed slots a holder runs when it finds slots due that
// nobody ran: after an outage of the whole fleet, a pause of the holder, a
// failover or a data loss.
type Policy string

// The catch-up policies.
const (
	// Skip runs no missed slot: the holder waits for the next one. A slot
	// found due within Decision.OnTime of its start still runs.
	Skip Policy = "skip"
	// Latest runs the most recent missed slot within the window, once.
	Latest Policy = "latest"
	// All runs every missed slot within the window, in order, one after
	// another.
	All Policy = "all"
)

// DefaultPolicy is the policy of a session that names none.
const DefaultPolicy = Latest

// DefaultWindow is the catch-up window of a session that names none.
const DefaultWindow = time.Hour

// DefaultOnTime is how late a slot may start and still count as on time
// under Skip.
const DefaultOnTime = time.Second

// ParsePolicy returns the policy named s ("" is DefaultPolicy), or an error
// wrapping ErrInvalid.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case "":
		return DefaultPolicy, nil
	case Skip, Latest, All:
		return p, nil
	}
	return "", fmt.Errorf("%w: catchup %q is not one of skip, latest, all", ErrInvalid, s)
}

// Cursor is what the holders of a session know of its slots; a holder keeps
// it in the session's fenced state so that its successor knows it too.
type Cursor struct {
	// Through is the latest slot decided: run or skipped. Slots at or
	// before it are never run again. Zero: nothing known (a new session,
	// or the state was lost).
	Through time.Time
	// Running says a poll of the session is still running, so a slot due
	// now is skipped, never run beside it (overlap).
	Running bool
}

// Input is everything Decide needs besides the schedule.
type Input struct {
	// Now is the decision's time.
	Now time.Time
	// Policy is the catch-up policy ("" is DefaultPolicy).
	Policy Policy
	// Window bounds catch-up: slots due more than Window before Now are
	// never run (0 is DefaultWindow).
	Window time.Duration
	// OnTime is the lateness within which a slot is not "missed" under
	// Skip (0 is DefaultOnTime).
	OnTime time.Duration
	// Since, if set, is when the session was added or resumed, or when a
	// holder with nothing known (a zero Through) took it: slots due before
	// it are not run under any policy (there was nothing to miss, or
	// nothing says they were missed).
	Since time.Time
}

// Decision is what a holder does at Input.Now.
type Decision struct {
	// Run is the slot to start now (zero: none).
	Run time.Time
	// Skipped counts the slots passed over now: missed slots the policy
	// or the window does not run, and slots due while a poll was running.
	// Slots before Since, and those passed over with nothing known (a zero
	// Through: they may have run), are not counted. Past maxCounted it is
	// an estimate from the schedule's rate.
	Skipped int
	// Through is the cursor's new Through: the latest slot run or skipped.
	Through time.Time
	// Wake is when to decide again: the start of the next slot after
	// Through (at or before Now when All has more to run).
	Wake time.Time
}

// maxCounted bounds the slots Decide walks to count skipped ones.
const maxCounted = 1000

// Decide returns what to do at in.Now given the cursor. It is pure: the
// same arguments give the same decision on every holder.
func (s *Schedule) Decide(c Cursor, in Input) Decision {
	in = in.withDefaults()
	d, from := s.resumeFrom(c, in)
	first := s.Next(from)
	if first.IsZero() || first.After(in.Now.Add(-s.off)) {
		d.Wake = s.startOf(first) // nothing due
		return d
	}
	d = s.pick(d, c, in, s.dueFrom(first, in.Now))
	if c.Through.IsZero() && !c.Running {
		// Nothing known: the slots passed over may well have run.
		d.Skipped = 0
	}
	d.Wake = s.startOf(s.Next(d.Through))
	return d
}

// withDefaults returns in with the defaults of the fields left zero.
func (in Input) withDefaults() Input {
	if in.Policy == "" {
		in.Policy = DefaultPolicy
	}
	if in.Window <= 0 {
		in.Window = DefaultWindow
	}
	if in.OnTime <= 0 {
		in.OnTime = DefaultOnTime
	}
	return in
}

// sinceSlot is the slot time whose start is in.Since: slots before it were
// due before Since. Zero when Since is.
func (s *Schedule) sinceSlot(in Input) time.Time {
	if in.Since.IsZero() {
		return time.Time{}
	}
	return in.Since.Add(-s.off)
}

// oldestRunnable is the earliest slot time Decide may still run at in.Now:
// the start of the catch-up window, or sinceSlot if later.
func (s *Schedule) oldestRunnable(in Input) time.Time {
	oldest := in.Now.Add(-in.Window).Add(-s.off)
	if since := s.sinceSlot(in); since.After(oldest) {
		return since
	}
	return oldest
}

// resumeFrom returns the decision so far and the time after which Decide
// looks for due slots: the cursor; or, when nothing is known or the
// cursor is older than oldestRunnable, just before that. Moving a known
// cursor up counts the slots it passes as skipped, except those due
// before Since (there was nothing to miss).
func (s *Schedule) resumeFrom(c Cursor, in Input) (Decision, time.Time) {
	d := Decision{Through: c.Through}
	oldest := s.oldestRunnable(in)
	if !c.Through.IsZero() && !c.Through.Before(oldest) {
		return d, c.Through
	}
	from := oldest.Add(-time.Nanosecond) // a slot exactly at oldest is in
	if c.Through.IsZero() {
		return d, from
	}
	floor := c.Through
	if since := s.sinceSlot(in); since.After(floor) {
		floor = since.Add(-time.Nanosecond)
	}
	d.Skipped = s.countSlots(floor, from)
	d.Through = from
	return d, from
}

// dueSlots are the slots due at a decision: first .. latest, n of them.
type dueSlots struct {
	first, latest time.Time
	n             int
}

// dueFrom returns the due slots from first, a due slot, to the last whose
// start is at or before now, walking at most maxCounted of them.
func (s *Schedule) dueFrom(first, now time.Time) dueSlots {
	last := now.Add(-s.off) // slots at or before it are due
	due := dueSlots{first: first, latest: first, n: 1}
	for t := s.Next(first); !t.IsZero() && !t.After(last); t = s.Next(t) {
		due.latest = t
		due.n++
		if due.n > maxCounted {
			// Jump: the latest due slot is the one before Next(last).
			due.latest = s.prev(t, last)
			due.n += s.countSlots(t, last) - 1
			break
		}
	}
	return due
}

// pick returns d with the slot to run among due, if any, the slots it
// passes over counted, and the cursor moved past them: none while a poll
// runs (overlap), the oldest under All, the latest under Latest, and
// under Skip the latest if it is on time (within in.OnTime of its start).
func (s *Schedule) pick(d Decision, c Cursor, in Input, due dueSlots) Decision {
	switch {
	case c.Running:
		d.Skipped += due.n
		d.Through = due.latest
	case in.Policy == All:
		d.Run = due.first
		d.Through = due.first
	case in.Policy == Latest || !in.Now.After(s.Start(due.latest).Add(in.OnTime)):
		d.Run = due.latest
		d.Skipped += due.n - 1
		d.Through = due.latest
	default: // Skip, and the latest is late
		d.Skipped += due.n
		d.Through = due.latest
	}
	return d
}

// startOf is Start, keeping the zero time (no slot) zero.
func (s *Schedule) startOf(slot time.Time) time.Time {
	if slot.IsZero() {
		return slot
	}
	return s.Start(slot)
}

// countSlots counts the slots in (after, until], walking at most
// maxCounted of them and estimating the rest from PerDay.
func (s *Schedule) countSlots(after, until time.Time) int {
	n := 0
	t := after
	for {
		t = s.Next(t)
		if t.IsZero() || t.After(until) {
			return n
		}
		n++
		if n == maxCounted {
			rest := until.Sub(t).Hours() / 24 * s.PerDay()
			return n + int(rest)
		}
	}
}

// prev returns the last slot at or before until, searching from a slot
// known to be at or before it.
func (s *Schedule) prev(known, until time.Time) time.Time {
	// Slots are not evenly spaced in general: bisect on time.
	lo, hi := known, until
	for hi.Sub(lo) > time.Nanosecond {
		mid := lo.Add(hi.Sub(lo) / 2)
		if n := s.Next(mid); !n.IsZero() && !n.After(until) {
			lo = n
		} else {
			hi = mid
		}
	}
	return lo
}

// Prev returns the last slot at or before t, or the zero time if none
// comes within five years before it.
func (s *Schedule) Prev(t time.Time) time.Time {
	for back := time.Second; back < 5*366*24*time.Hour; back *= 2 {
		if c := s.Next(t.Add(-back)); !c.IsZero() && !c.After(t) {
			return s.prev(c, t)
		}
	}
	return time.Time{}
}
