package httppoll

import (
	"net/http"
	"sync/atomic"
)

// Outcome is how one poll ended, as counted in Stats.Polls.
type Outcome int

// The outcomes of a poll. Only ServerError, Timeout and Error fail the
// poll (Poll returns an error); Cancelled is a poll cut short by its
// lease ending, which neither fails nor succeeds.
const (
	OutcomeOK           Outcome = iota // a response below 400, other than 304
	OutcomeNotModified                 // 304 to a conditional request: the content is unchanged
	OutcomeClientError                 // a 4xx response
	OutcomeServerError                 // a response of 500 or above
	OutcomeTimeout                     // no response within the poll timeout (waiting for a host slot included)
	OutcomeError                       // no response: refused, reset, DNS, TLS or another transport error
	OutcomeCancelled                   // the poll's context ended (the lease stopped being held)
	OutcomeProfileError                // not sent: the session's profile is unknown here or a file of it unreadable
	numOutcomes
)

// Outcomes returns every Outcome, in order.
func Outcomes() []Outcome {
	out := make([]Outcome, numOutcomes)
	for i := range out {
		out[i] = Outcome(i)
	}
	return out
}

// String is the outcome's metric label: "ok", "not_modified",
// "client_error", "server_error", "timeout", "error", "cancelled" or
// "profile_error".
func (o Outcome) String() string {
	switch o {
	case OutcomeOK:
		return "ok"
	case OutcomeNotModified:
		return "not_modified"
	case OutcomeClientError:
		return "client_error"
	case OutcomeServerError:
		return "server_error"
	case OutcomeTimeout:
		return "timeout"
	case OutcomeError:
		return "error"
	case OutcomeCancelled:
		return "cancelled"
	case OutcomeProfileError:
		return "profile_error"
	}
	return "unknown"
}

// outcomeOf is the outcome of a poll that got status (0 without a
// response) and failed with an error of class.
func outcomeOf(status int, class errClass) Outcome {
	switch {
	case class == classCanceled:
		return OutcomeCancelled
	case class == classTimeout:
		return OutcomeTimeout
	case class == classProfile:
		return OutcomeProfileError
	case class != classOK && class != classServer && class != classStatus:
		return OutcomeError
	case status >= http.StatusInternalServerError:
		return OutcomeServerError
	case status >= http.StatusBadRequest:
		return OutcomeClientError
	case status == http.StatusNotModified:
		return OutcomeNotModified
	}
	return OutcomeOK
}

// Stats are a Poller's counters since New.
type Stats struct {
	// Polls counts the polls by Outcome.
	Polls [numOutcomes]uint64
	// Changes counts the polls (with saved state) whose status, error
	// class or 2xx body hash differed from the saved state's; a session's
	// first poll, with no state yet, is not counted.
	Changes uint64
	// HostWaits counts the polls that waited for a slot of their host
	// (Config.MaxPerHost).
	HostWaits uint64
	// NoSlot counts the polls not sent because no slot of their host came
	// free within the wait allowed (Config.MaxPerHost, called without a
	// Coordinator): not failures.
	NoSlot uint64
	// StateSaves counts the states saved; StateStale those refused because
	// this worker no longer held the lease (state.ErrStale), StateTooLarge
	// those refused for their size, StateFailed those that failed
	// otherwise (Redis). None is retried: the next poll saves again.
	StateSaves, StateStale, StateTooLarge, StateFailed uint64
	// Throttled counts the polls answered 429 or 503 with a Retry-After
	// that moved the session's next poll (Config.MaxRetryAfter).
	Throttled uint64
}

// stats are the atomic counters behind Stats.
type stats struct {
	polls                                              [numOutcomes]atomic.Uint64
	changes, hostWaits, noSlot, throttled              atomic.Uint64
	stateSaves, stateStale, stateTooLarge, stateFailed atomic.Uint64
}

// Stats returns the Poller's counters.
func (p *Poller) Stats() Stats {
	var s Stats
	for i := range s.Polls {
		s.Polls[i] = p.stats.polls[i].Load()
	}
	s.Changes, s.HostWaits, s.NoSlot = p.stats.changes.Load(), p.stats.hostWaits.Load(), p.stats.noSlot.Load()
	s.StateSaves, s.StateStale = p.stats.stateSaves.Load(), p.stats.stateStale.Load()
	s.StateTooLarge, s.StateFailed = p.stats.stateTooLarge.Load(), p.stats.stateFailed.Load()
	s.Throttled = p.stats.throttled.Load()
	return s
}
