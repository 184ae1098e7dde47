package fleet

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pollworker/pollworker/lease"
)

// The invariants Check verifies, by the names `pollworker check` reports
// them under.
const (
	CheckHolderNotLive = "lease-holder-not-live"
	CheckPrevious      = "lease-held-by-previous-incarnation"
	CheckDuplicateID   = "duplicate-id"
	CheckNoLease       = "session-without-lease"
	CheckNotPlanned    = "not-planned-owner"
	CheckUnplaceable   = "unplaceable"
	CheckBadKey        = "bad-key"
)

// MaxProblemLines bounds the lines one check reports; the rest are
// counted in one more line.
const MaxProblemLines = 10

// RenewSlack is how much a lease's remaining TTL may exceed what the time
// between two reads leaves of it, before Check counts it as renewed.
const RenewSlack = 200 * time.Millisecond

// Problem is one broken invariant.
type Problem struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
	// Count is the number of items the line stands for: 1, or more for
	// a line that sums up the rest ("and 20 more").
	Count int `json:"count"`
}

// Checked is what Check found.
type Checked struct {
	// Checks are the invariants verified.
	Checks []string
	// Leases is the number of leases of the active placeable sessions at
	// the last read.
	Leases int
	// Problems are the broken invariants, one per offending item (at most
	// MaxProblemLines per check, then one line for the rest).
	Problems []Problem
	// Notes say what was counted under a bound, or not counted.
	Notes []string
}

// Check verifies the invariants of the sessions' leases from two reads
// (ReadAll) taken some time apart (the same read twice: nothing is seen
// renewed, and duplicate-id is not checked), reporting only what both
// reads saw:
//
//   - an active session's lease is held by a worker that is not live
//     (lease-holder-not-live), or by a previous incarnation of a live id
//     (lease-held-by-previous-incarnation), or renewed between the reads
//     by an incarnation other than its id's heartbeat's (duplicate-id);
//   - an active session had no lease at both reads (session-without-lease;
//     sessions waiting out the loss quarantine are a note, and with no live
//     worker they are counted in one line);
//   - more than maxNotPlanned leases (-1: no bound, a note) are held, at
//     both reads, by a live worker the plan does not place them on
//     (not-planned-owner);
//   - an active session's key is of the wrong type (bad-key);
//   - active sessions have a selector no live worker matches (unplaceable).
func Check(first, last *Snapshot, maxNotPlanned int) Checked {
	c := Checked{Checks: []string{CheckHolderNotLive, CheckPrevious, CheckNoLease, CheckNotPlanned, CheckBadKey}}
	elapsed := last.ServerTime.Sub(first.ServerTime)
	if first != last {
		c.Checks = append(c.Checks, CheckDuplicateID)
	}
	c.Leases, c.Problems = checkLeases(first, last, elapsed, maxNotPlanned, &c.Notes)
	c.Checks = append(c.Checks, CheckUnplaceable)
	before, after := first.Unplaceable(), last.Unplaceable()
	for _, sel := range slices.Sorted(maps.Keys(after)) {
		ids := after[sel]
		if _, ok := before[sel]; !ok {
			continue // a worker may just be restarting: only what both reads saw
		}
		c.Problems = append(c.Problems, Problem{Check: CheckUnplaceable, Detail: fmt.Sprintf("selector %s: %d active sessions and no live worker whose labels match it: polled by nobody%s",
			sel, len(ids), SampleText(ids[:min(len(ids), MaxProblemLines)], len(ids))), Count: len(ids)})
	}
	return c
}

// checkLeases verifies the leases of the active placeable sessions of
// last; it returns their number and the problems, and adds to notes.
func checkLeases(first, last *Snapshot, elapsed time.Duration, maxNotPlanned int, notes *[]string) (int, []Problem) {
	c := &leaseChecker{first: first, last: last, elapsed: elapsed, lines: map[string]int{}, waiting: map[string]bool{},
		quarantined: last.Quarantined(), live: last.Members.Len() > 0}
	for _, id := range c.quarantined.Sessions {
		c.waiting[id] = true
	}
	for _, id := range last.Placed() {
		c.session(id)
	}
	return c.leases, c.finish(maxNotPlanned, notes)
}

// leaseChecker is checkLeases' state.
type leaseChecker struct {
	first, last *Snapshot
	elapsed     time.Duration
	quarantined Quarantined
	waiting     map[string]bool // the sessions that wait out the quarantine
	live        bool            // some worker is live
	probs       []Problem
	lines       map[string]int // check -> problems found (lines or not)

	leases, notPlanned, unowned int
	notPlannedIDs               []string
}

// add reports a problem, up to MaxProblemLines lines per check.
func (c *leaseChecker) add(check, detail string) {
	c.lines[check]++
	if c.lines[check] <= MaxProblemLines {
		c.probs = append(c.probs, Problem{Check: check, Detail: detail, Count: 1})
	}
}

// holding is session id's lease as s read it.
func holding(s *Snapshot, id string) lease.Holding {
	if f, ok := s.Sessions[id]; ok {
		return f.Lease
	}
	return lease.Holding{}
}

// session checks one active placeable session.
func (c *leaseChecker) session(id string) {
	h := holding(c.last, id)
	if h.Bad != nil {
		c.add(CheckBadKey, fmt.Sprintf("session %s: its %s key %s: %s; nobody acquires it until the key is repaired or deleted by hand", id, h.Bad.Role, h.Bad.Key, h.Bad.Problem))
	}
	switch {
	case h.Owner != "":
		c.leases++
		c.held(id, h)
	case h.Bad != nil:
	case c.waiting[id] && c.live: // waits, and says so in a note
	case holding(c.first, id).Owner != "": // not at both reads
	case !c.live:
		c.unowned++
	default:
		c.add(CheckNoLease, fmt.Sprintf("session %s has no lease%s; planned owner %s", id, sinceText(c.elapsed), OrNobody(c.last.OwnerOf(id))))
	}
}

// renewed reports whether the same acquisition held the lease at both
// reads and its TTL was set again in between.
func (c *leaseChecker) renewed(id string, h lease.Holding) bool {
	h0 := holding(c.first, id)
	return c.elapsed > 0 && h0.Owner == h.Owner && h.Remaining > h0.Remaining-c.elapsed+RenewSlack
}

// held checks the holder of a session's lease.
func (c *leaseChecker) held(id string, h lease.Holding) {
	o := c.last.HolderOf(h.Owner)
	switch {
	case !o.Live && c.renewed(id, h):
		c.add(CheckHolderNotLive, fmt.Sprintf("session %s: lease held by %s, which is not live, yet renewed it during the check (it renews without heartbeating)",
			id, HolderText(o.ID, o.Incarnation)))
	case !o.Live:
		c.add(CheckHolderNotLive, fmt.Sprintf("session %s: lease held by %s, which is not live (nobody polls it until it expires in %s)",
			id, HolderText(o.ID, o.Incarnation), MsDuration(h.Remaining.Milliseconds())))
	case !o.Current && c.renewed(id, h):
		c.add(CheckDuplicateID, fmt.Sprintf("id %s: its heartbeat is incarnation %s, but incarnation %s renewed the lease of session %s during the check: two processes run with this id",
			o.ID, c.last.Infos[o.ID].Incarnation, o.Incarnation, id))
	case !o.Current:
		c.add(CheckPrevious, fmt.Sprintf("session %s: lease held by a previous incarnation %s of %s (nobody polls it until it expires in %s)",
			id, o.Incarnation, o.ID, MsDuration(h.Remaining.Milliseconds())))
	case c.last.OwnerOf(id) != o.ID && holding(c.first, id).Owner == h.Owner && c.first.OwnerOf(id) != o.ID:
		c.notPlanned++
		if len(c.notPlannedIDs) < MaxProblemLines {
			c.notPlannedIDs = append(c.notPlannedIDs, id)
		}
	}
}

// finish adds the lines that sum up, and the notes.
func (c *leaseChecker) finish(maxNotPlanned int, notes *[]string) []Problem {
	if len(c.quarantined.Sessions) > 0 && c.live {
		*notes = append(*notes, CheckNoLease+": not counted: "+c.quarantined.Text())
	}
	if c.unowned > 0 {
		c.probs = append(c.probs, Problem{Check: CheckNoLease, Detail: fmt.Sprintf("no live worker: %d active sessions have no lease%s", c.unowned, sinceText(c.elapsed)), Count: c.unowned})
	}
	for _, check := range slices.Sorted(maps.Keys(c.lines)) {
		if n := c.lines[check]; n > MaxProblemLines {
			c.probs = append(c.probs, Problem{Check: check, Detail: fmt.Sprintf("and %d more", n-MaxProblemLines), Count: n - MaxProblemLines})
		}
	}
	if c.notPlanned == 0 {
		return c.probs
	}
	text := fmt.Sprintf("%d leases held%s by a live worker the plan does not place them on (e.g. %s)", c.notPlanned, sinceText(c.elapsed), strings.Join(c.notPlannedIDs, ", "))
	if maxNotPlanned >= 0 && c.notPlanned > maxNotPlanned {
		c.probs = append(c.probs, Problem{Check: CheckNotPlanned, Detail: fmt.Sprintf("%s; at most %d allowed (--max-not-planned)", text, maxNotPlanned), Count: c.notPlanned})
	} else {
		*notes = append(*notes, CheckNotPlanned+": "+text)
	}
	return c.probs
}

// Text says in one line why the sessions wait.
func (q Quarantined) Text() string {
	end := "starts at the next acquisition, then lasts --loss-quarantine (the lease TTL by default)"
	if q.Left > 0 {
		end = "ends in " + ShortDuration(q.Left)
	}
	return fmt.Sprintf("%d active sessions wait out the loss quarantine (new keyspace or lost data: no free lease is taken until "+
		"every lease granted before has ended; `pollworker init` spares a new keyspace this), which %s", len(q.Sessions), end)
}

// sinceText is " for at least 20s" for a positive elapsed time, "" else.
func sinceText(elapsed time.Duration) string {
	if elapsed <= 0 {
		return ""
	}
	return " for at least " + ShortDuration(elapsed)
}

// HolderText names a lease holder with its incarnation.
func HolderText(holder, incarnation string) string {
	if incarnation == "" {
		return holder
	}
	return holder + " (incarnation " + incarnation + ")"
}

// SampleText is " (a, b, and 3 more)" for the ids shown of total, "" for
// none.
func SampleText(shown []string, total int) string {
	if total == 0 {
		return ""
	}
	out := " (" + strings.Join(shown, ", ")
	if more := total - len(shown); more > 0 {
		out += fmt.Sprintf(", and %d more", more)
	}
	return out + ")"
}
