package lease

import (
	"strconv"
	"strings"
	"time"
)

// The values scripts/lua/acquire.lua and release.lua write, taken apart
// for readers that hold no lease (pollworker explain, status, check
// through package fleet): the format of each lives here, beside the
// scripts' callers, and nowhere else in Go.

// MintedAt reads the time a fencing token was minted: acquire.lua mints
// max(counter + 1, server clock in µs), so a token within a day before now
// (the server's clock) is, to the microsecond, when it was minted. ok is
// false when the token does not tell: a token from a plain counter (older
// versions), or one ahead of the clock (minted as counter + 1).
func MintedAt(token int64, now time.Time) (at time.Time, ok bool) {
	at = time.UnixMicro(token)
	ago := now.Sub(at)
	if token <= 0 || ago < 0 || ago > 24*time.Hour {
		return time.Time{}, false
	}
	return at, true
}

// LossMarker is a hash slot's loss marker ("<run id>:<quarantine end
// ms>[:2]", keyspace.Space.Epoch): the run id of the Redis server that
// wrote it, and the end of the quarantine it started (no free lease of the
// slot is taken before it); ":2" says that the slot holds no key of the
// layout before the fencing records (acquire.lua).
type LossMarker struct {
	// RunID is the run id of the server that wrote the marker: a marker
	// of another run id than the server's means a restart or failover,
	// and the next acquisition starts a quarantine.
	RunID string
	// QuarantineEnd is the end of the quarantine, on the server's clock;
	// zero when the marker does not say.
	QuarantineEnd time.Time
}

// ParseLossMarker takes a loss marker apart.
func ParseLossMarker(v string) LossMarker {
	runID, end, _ := strings.Cut(v, ":")
	end, _, _ = strings.Cut(end, ":") // before ":2"
	m := LossMarker{RunID: runID}
	if ms, err := strconv.ParseInt(end, 10, 64); err == nil {
		m.QuarantineEnd = time.UnixMilli(ms)
	}
	return m
}

// QuarantineLeft is how long the marker's quarantine lasts after now (the
// server's clock), 0 when over.
func (m LossMarker) QuarantineLeft(now time.Time) time.Duration {
	if m.QuarantineEnd.IsZero() {
		return 0
	}
	return max(m.QuarantineEnd.Sub(now), 0)
}

// HandoffMark is a session's handoff mark, written by a graceful release
// (Manager.HandOff) and consumed by the next acquisition. Readers get its
// due time from Inspect (Holding.HandoffDue), which reads it in the
// session's fencing record; ParseHandoffMark reads the mark key of the
// layout before the records ("<release ms>[:<next poll due ms>]",
// keyspace.Space.Released).
type HandoffMark struct {
	// Released is when the lease was released, on the server's clock;
	// zero when not read (Holding.HandoffDue gives only the due time).
	Released time.Time
	// NextPoll is when the next poll was due on the releasing holder's
	// schedule; zero when it did not say.
	NextPoll time.Time
}

// ParseHandoffMark takes a handoff mark apart; ok is false for a value
// that is not one (acquire.lua then ignores it too).
func ParseHandoffMark(v string) (m HandoffMark, ok bool) {
	rel, due, hasDue := strings.Cut(v, ":")
	ms, err := strconv.ParseInt(rel, 10, 64)
	if err != nil || ms < 0 {
		return HandoffMark{}, false
	}
	m.Released = time.UnixMilli(ms)
	if hasDue && due != "" {
		d, err := strconv.ParseInt(due, 10, 64)
		if err != nil || d < 0 {
			return HandoffMark{}, false
		}
		m.NextPoll = time.UnixMilli(d)
	}
	return m, true
}
