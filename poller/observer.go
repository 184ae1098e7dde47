package poller

import "time"

// Observer receives the coordinator's measurements, for metrics. Methods
// are called from several goroutines and must not block. The metrics
// package implements it with Prometheus collectors.
type Observer interface {
	// LeaseEvent counts one lease event with its reason ("" when none).
	LeaseEvent(t EventType, reason string)
	// RenewCycle reports one renewal cycle: its round trip, and how many
	// leases were renewed, lost and made uncertain.
	RenewCycle(roundTrip time.Duration, renewed, lost, uncertain int)
	// PollDone reports one poll: its duration and outcome ("ok", "error",
	// "panic", "cancelled", or "no_capacity": not sent for want of a local
	// resource, ErrNoCapacity).
	PollDone(d time.Duration, outcome string)
	// Round reports the view after a round: live members, active sessions,
	// sessions owned here, malformed session entries, and whether the
	// membership changed.
	Round(members, sessions, owned, malformed int, membershipChanged bool)
	// RedisError counts a failed Redis operation by name ("heartbeat",
	// "renew", "members", "sessions", "acquire", "release", "publish",
	// "state": the load of the state before a first poll, Config.Stateful).
	RedisError(op string)
	// HandoffGap reports, at the first poll under a lease that followed a
	// graceful release, how long the session went unpolled: from the
	// previous holder's release (Redis clock) to this acquisition, plus the
	// local time from the acquisition to the start of that first poll.
	HandoffGap(d time.Duration)
	// BadData counts one bad record the worker found and worked around,
	// once per record (when it logs it): kind is BadDataState (a corrupt
	// session state, read as never saved) or BadDataMember (an entry of
	// the node index that is not a live worker, ignored).
	BadData(kind string)
}

// The kinds of BadData.
const (
	BadDataState  = "state"
	BadDataMember = "member"
)

type nopObserver struct{}

func (nopObserver) LeaseEvent(EventType, string)            {}
func (nopObserver) RenewCycle(time.Duration, int, int, int) {}
func (nopObserver) PollDone(time.Duration, string)          {}
func (nopObserver) Round(int, int, int, int, bool)          {}
func (nopObserver) RedisError(string)                       {}
func (nopObserver) HandoffGap(time.Duration)                {}
func (nopObserver) BadData(string)                          {}

// EventType names a lease event.
type EventType string

// The lease events reported to Config.OnEvent.
const (
	EventAcquired  EventType = "acquired"
	EventReleased  EventType = "released"
	EventLost      EventType = "lost"
	EventUncertain EventType = "uncertain"
	EventRecovered EventType = "recovered"
)

// Event is one change of one of this worker's leases.
type Event struct {
	Type    EventType
	Session string
	Token   int64
	Reason  string
	At      time.Time
}
