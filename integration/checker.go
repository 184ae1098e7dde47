package integration

import (
	"fmt"
	"time"

	"github.com/pollworker/pollworker/internal/history"
)

// The checks live in internal/history, shared with the demo; these names
// keep the tests of this package reading as before.
type (
	// Poll is history.Poll.
	Poll = history.Poll
	// Span is history.Span.
	Span = history.Span
	// History is history.History.
	History = history.History
	// Overlap is history.Overlap.
	Overlap = history.Overlap
	// Stale is history.Stale.
	Stale = history.Stale
	// SessionReport is history.SessionReport.
	SessionReport = history.SessionReport
	// Report is history.Report.
	Report = history.Report
	// Totals is history.Totals.
	Totals = history.Totals
)

// Check is history.Check.
func Check(h History) Report { return history.Check(h) }

// StateKind is what a StateEvent records.
type StateKind string

// The events of a session's state history.
const (
	// StateMint: an acquisition took the session's lease with the owner
	// value Owner (a new term: its lease is the current one from then on).
	StateMint StateKind = "mint"
	// StateSave: a save was accepted, written under Token by the owner
	// value of the attempt before it.
	StateSave StateKind = "save"
	// StateAttempt: a client called the save script as Owner with Token
	// (accepted or refused: a StateSave follows when it was accepted).
	StateAttempt StateKind = "attempt"
)

// StateEvent is one mint, save call or accepted save, in Redis's
// execution order.
type StateEvent struct {
	Session string
	Kind    StateKind
	Token   int64     // attempts and saves
	Owner   string    // mints and attempts
	At      time.Time // Redis's clock
}

// String is for the chaos log.
func (e StateEvent) String() string {
	return fmt.Sprintf("%s %s tok %d owner %s at %s", e.Kind, e.Session, e.Token, e.Owner, e.At.Format("15:04:05.000000"))
}

// StateReport is what CheckStateWrites found.
type StateReport struct {
	Saves int // accepted saves seen
	// StaleAttempts counts the save calls made by the owner value of an
	// earlier term than the session's last: from a holder whose lease had
	// moved on, which the script must refuse (Stale lists those it did
	// not). They show that a run exercised the fence.
	StaleAttempts int
	// Stale are the saves accepted from the owner value of an earlier
	// term than the session's last before them: the writer's acquisition
	// was no longer current (a newer one had taken the lease), so the save
	// should have been refused.
	Stale []StateEvent
	// Backwards are the saves whose token is below the previous save's of
	// their session: the stored state's token went back.
	Backwards []StateEvent
}

// CheckStateWrites checks a session-state history in execution order.
// Terms are told apart by their owner values (unique per acquisition; the
// fencing record holds a session's token only from its first release on,
// so the tokens minted are not all seen): a save by the current holder
// comes from the owner value of the session's last mint; one from the
// owner value of an earlier mint came from a holder whose lease had moved
// on. A mint missed (the watch was reconnecting) can only hide a finding,
// never make one: an owner value no mint was seen for is not flagged.
func CheckStateWrites(evs []StateEvent) StateReport {
	var rep StateReport
	term := map[string]map[string]int{} // session → owner value → its term
	terms := map[string]int{}           // session → its last term
	stale := func(session, owner string) bool {
		t, ok := term[session][owner]
		return ok && t < terms[session]
	}
	attempt := map[string]string{} // session → the owner value of its last save call
	saved := map[string]int64{}
	for _, e := range evs {
		switch e.Kind {
		case StateMint:
			if term[e.Session] == nil {
				term[e.Session] = map[string]int{}
			}
			if _, again := term[e.Session][e.Owner]; !again {
				terms[e.Session]++
				term[e.Session][e.Owner] = terms[e.Session]
			}
		case StateAttempt:
			attempt[e.Session] = e.Owner
			if stale(e.Session, e.Owner) {
				rep.StaleAttempts++
			}
		case StateSave:
			rep.Saves++
			e.Owner = attempt[e.Session]
			if stale(e.Session, e.Owner) {
				rep.Stale = append(rep.Stale, e)
			}
			if last, ok := saved[e.Session]; ok && e.Token < last {
				rep.Backwards = append(rep.Backwards, e)
			}
			saved[e.Session] = max(saved[e.Session], e.Token)
		}
	}
	return rep
}
