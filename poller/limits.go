package poller

import (
	"errors"

	"github.com/pollworker/pollworker/session"
)

// GroupLimiter is implemented by a Poller that bounds how many of its
// polls of one group of sessions run at once (httppoll: the requests in
// flight to one host). The Coordinator keeps that bound in front of the
// Poller: a due poll of a full group waits in the scheduler, ordered by
// due time with every other poll waiting for a slot, and starts when a
// poll of its group returns. It thus neither waits inside Poll (holding a
// slot of Config.MaxPolls, in order of arrival) nor fails for the wait,
// and a worker that falls behind for it says so (PollStats.BehindReason
// BehindHostLimit, with the group in BehindHost).
type GroupLimiter interface {
	// PollGroup returns the group of s's polls and how many polls of the
	// group may run at once; an empty group or a max below 1 means none.
	// It is called once per poll loop (a lease held), not per poll.
	PollGroup(s session.Session) (group string, max int)
}

// ErrNoCapacity is wrapped by the error of a poll that did not reach its
// target for want of a local resource (httppoll: no slot of the host came
// free within the wait it allows). Such a poll is no failure of the
// session: the Coordinator neither counts it as an error nor backs off,
// and polls the session again at its next due time.
var ErrNoCapacity = errors.New("poller: no capacity for the poll")
