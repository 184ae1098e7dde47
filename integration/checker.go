package integration

import "github.com/pollworker/pollworker/internal/history"

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
