package results

import "fmt"

// RecordMode says which poll results a Poller records.
type RecordMode int

// Record modes.
const (
	// RecordAll records every result (the default).
	RecordAll RecordMode = iota
	// RecordChanges records only the results that say the response
	// changed (Result.Changed): another status, class of error (timeout,
	// refused, reset, DNS, TLS, ...), ETag or body than the session's
	// previous poll, whichever worker made it.
	RecordChanges
	// RecordNone records nothing.
	RecordNone
)

// String returns "all", "changes" or "none".
func (m RecordMode) String() string {
	switch m {
	case RecordAll:
		return "all"
	case RecordChanges:
		return "changes"
	case RecordNone:
		return "none"
	}
	return fmt.Sprintf("RecordMode(%d)", int(m))
}

// ParseRecordMode parses "all", "changes" or "none".
func ParseRecordMode(s string) (RecordMode, error) {
	for _, m := range []RecordMode{RecordAll, RecordChanges, RecordNone} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: record mode %q must be all, changes or none", ErrConfig, s)
}
