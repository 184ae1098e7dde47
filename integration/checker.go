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
	// StateMint: an acquisition minted a fencing token (the session's
	// current lease has it from then on).
	StateMint StateKind = "mint"
	// StateSave: a save was accepted, written under this token.
	StateSave StateKind = "save"
	// StateAttempt: a client called the save script with this token
	// (accepted or refused: a StateSave follows when it was accepted).
	StateAttempt StateKind = "attempt"
)

// StateEvent is one mint or accepted save, in Redis's execution order.
type StateEvent struct {
	Session string
	Kind    StateKind
	Token   int64
	At      time.Time // Redis's clock
}

// String is for the chaos log.
func (e StateEvent) String() string {
	return fmt.Sprintf("%s %s tok %d at %s", e.Kind, e.Session, e.Token, e.At.Format("15:04:05.000000"))
}

// StateReport is what CheckStateWrites found.
type StateReport struct {
	Saves int // accepted saves seen
	// StaleAttempts counts the save calls made under a token below the
	// last one minted for their session: from a holder whose lease had
	// moved on, which the script must refuse (Stale lists those it did
	// not). They show that a run exercised the fence.
	StaleAttempts int
	// Stale are the saves accepted under a token below the last one
	// minted for their session before them: the writer's acquisition was
	// no longer current (a newer one had taken the lease), so the save
	// should have been refused.
	Stale []StateEvent
	// Backwards are the saves whose token is below the previous save's of
	// their session: the stored state's token went back.
	Backwards []StateEvent
}

// CheckStateWrites checks a session-state history in execution order. A
// save by the current holder carries the session's latest minted token
// (the holder's, which every later acquisition exceeds); an accepted save
// under an older token came from a holder whose lease had moved on. A mint
// missed (the watch was reconnecting) can only hide a finding, never make
// one: a save above the last mint seen is not flagged.
func CheckStateWrites(evs []StateEvent) StateReport {
	var rep StateReport
	minted := map[string]int64{}
	saved := map[string]int64{}
	for _, e := range evs {
		switch e.Kind {
		case StateMint:
			minted[e.Session] = max(minted[e.Session], e.Token)
		case StateAttempt:
			if e.Token < minted[e.Session] {
				rep.StaleAttempts++
			}
		case StateSave:
			rep.Saves++
			if e.Token < minted[e.Session] {
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
