package poller

import "time"

// Observer is the one outlet of the Coordinator's events and measurements
// (Coordinator.Status is the snapshot beside it): its lease events, renewal
// cycles, polls, rounds, Redis errors, handoff gaps, bad data and the
// slots of scheduled sessions. Set it in Config.Observer; embed
// NopObserver to implement only the hooks you need. The metrics package
// implements it with Prometheus collectors.
//
// Each hook says which goroutine calls it. Hooks are called from several
// goroutines, so calls may overlap (different hooks, or one hook for
// different sessions), never after Run has returned; an implementation
// must be safe for concurrent use, and no hook may block: each runs on a
// path that renews leases or runs polls, and delays it for as long as it
// takes. A hook that panics is recovered: the panic is logged (the first
// of each hook at error level, with its stack) and counted
// (Status.ObserverPanics), and the worker goes on.
type Observer interface {
	// LeaseEvent reports one change of one of this worker's leases, in
	// the goroutine that changed it: the main loop (acquired, released at
	// a handoff or a pause), Run's drain (released; lost with reason
	// "abandoned" for a lease whose poll outlived DrainTimeout), the
	// renewal loop (uncertain, lost, recovered) or the timer of a lease's
	// deadline (lost).
	LeaseEvent(e Event)
	// RenewCycle reports one renewal cycle, from the renewal loop.
	RenewCycle(r RenewReport)
	// PollDone reports one poll once Poll returned (or panicked), from the
	// goroutine that ran it (a poll runner); not for a poll that returns
	// after Run did (one abandoned at the drain).
	PollDone(p PollReport)
	// Round reports the view after a round, from the main loop.
	Round(r RoundReport)
	// RedisError counts a failed Redis operation by name, from the
	// goroutine that ran it: "heartbeat" (the heartbeat loop), "renew"
	// (the renewal loop), "members", "sessions", "acquire", "release",
	// "publish" (the main loop; "release" also from Run's drain), "state"
	// (a poll runner: the load of the state before a first poll, with
	// Config.Stateful, or of a scheduled session's slots).
	RedisError(op string)
	// HandoffGap reports, at the first poll under a lease that followed a
	// graceful release, how long the session went unpolled: from the
	// previous holder's release (Redis clock) to this acquisition, plus the
	// local time from the acquisition to the start of that first poll.
	// From the poll runner about to run that poll.
	HandoffGap(d time.Duration)
	// BadData counts one bad record the worker found and worked around,
	// once per record (when it logs it): kind is BadDataState (a corrupt
	// session state, read as never saved; from a poll runner),
	// BadDataMember (an entry of the node index that is not a live
	// worker, ignored; from the main loop) or BadDataBucket (a session
	// index bucket of the wrong type, read as empty; from the main loop).
	BadData(kind string)
	// SlotStarted reports how late a scheduled session's slot poll starts
	// after the slot's start (its time plus the session's jitter offset),
	// from the poll runner about to run it.
	SlotStarted(lateness time.Duration)
	// SlotsSkipped counts n slots of a scheduled session passed over, from
	// a poll runner: reason SkipOverlap (due while the previous poll ran)
	// or SkipCatchUp (missed, and not run by the catch-up policy or outside
	// its window).
	SlotsSkipped(n int, reason string)
}

// RenewReport is one renewal cycle (Observer.RenewCycle).
type RenewReport struct {
	// RoundTrip is the time the cycle's Redis calls took.
	RoundTrip time.Duration
	// Renewed, Lost and Uncertain count the leases renewed, found lost and
	// made uncertain (Redis did not answer) by the cycle.
	Renewed, Lost, Uncertain int
}

// PollReport is one poll (Observer.PollDone).
type PollReport struct {
	// Session is the id of the session polled, Token its lease's fencing
	// token.
	Session string
	Token   int64
	// Duration is the time Poll took.
	Duration time.Duration
	// Outcome is "ok", "error", "panic", "cancelled" (its context ended:
	// the lease term ended or the poll was aborted), or "no_capacity"
	// (not sent for want of a local resource: ErrNoCapacity).
	Outcome string
}

// RoundReport is the view after a round (Observer.Round).
type RoundReport struct {
	// Members is the number of live workers seen.
	Members int
	// Sessions is the number of active sessions this worker reads (those
	// assigned to it, or polled by it as orphans).
	Sessions int
	// Owned is the number of sessions whose lease this worker holds.
	Owned int
	// Malformed is the number of malformed session entries read.
	Malformed int
	// MembershipChanged reports that the live members changed since the
	// previous round.
	MembershipChanged bool
}

// The kinds of BadData.
const (
	BadDataState  = "state"
	BadDataMember = "member"
	BadDataBucket = "bucket"
)

// NopObserver is an Observer that does nothing: the default, and the
// one to embed in an Observer that needs only some hooks.
type NopObserver struct{}

var _ Observer = NopObserver{}

// LeaseEvent does nothing.
func (NopObserver) LeaseEvent(Event) {}

// RenewCycle does nothing.
func (NopObserver) RenewCycle(RenewReport) {}

// PollDone does nothing.
func (NopObserver) PollDone(PollReport) {}

// Round does nothing.
func (NopObserver) Round(RoundReport) {}

// RedisError does nothing.
func (NopObserver) RedisError(string) {}

// HandoffGap does nothing.
func (NopObserver) HandoffGap(time.Duration) {}

// BadData does nothing.
func (NopObserver) BadData(string) {}

// SlotStarted does nothing.
func (NopObserver) SlotStarted(time.Duration) {}

// SlotsSkipped does nothing.
func (NopObserver) SlotsSkipped(int, string) {}

// LeaseEvents returns an Observer that calls f for each lease event
// (Observer.LeaseEvent: the same goroutines, and f must not block either)
// and ignores the measurements: for an embedder that only logs or counts
// its lease events.
func LeaseEvents(f func(Event)) Observer { return leaseEvents{f: f} }

// leaseEvents is LeaseEvents's Observer.
type leaseEvents struct {
	NopObserver
	f func(Event)
}

// LeaseEvent calls o.f(e).
func (o leaseEvents) LeaseEvent(e Event) { o.f(e) }

// Observers returns an Observer that calls each of obs in turn, in the
// goroutine the hook is called from (nil ones are skipped): Prometheus
// metrics (metrics.New) beside an embedder's own hooks, without a
// forwarder of its own.
func Observers(obs ...Observer) Observer {
	var all observers
	for _, o := range obs {
		if o != nil {
			all = append(all, o)
		}
	}
	return all
}

// observers is Observers's Observer.
type observers []Observer

// LeaseEvent calls each observer's.
func (os observers) LeaseEvent(e Event) {
	for _, o := range os {
		o.LeaseEvent(e)
	}
}

// RenewCycle calls each observer's.
func (os observers) RenewCycle(r RenewReport) {
	for _, o := range os {
		o.RenewCycle(r)
	}
}

// PollDone calls each observer's.
func (os observers) PollDone(p PollReport) {
	for _, o := range os {
		o.PollDone(p)
	}
}

// Round calls each observer's.
func (os observers) Round(r RoundReport) {
	for _, o := range os {
		o.Round(r)
	}
}

// RedisError calls each observer's.
func (os observers) RedisError(op string) {
	for _, o := range os {
		o.RedisError(op)
	}
}

// HandoffGap calls each observer's.
func (os observers) HandoffGap(d time.Duration) {
	for _, o := range os {
		o.HandoffGap(d)
	}
}

// BadData calls each observer's.
func (os observers) BadData(kind string) {
	for _, o := range os {
		o.BadData(kind)
	}
}

// SlotStarted calls each observer's.
func (os observers) SlotStarted(lateness time.Duration) {
	for _, o := range os {
		o.SlotStarted(lateness)
	}
}

// SlotsSkipped calls each observer's.
func (os observers) SlotsSkipped(n int, reason string) {
	for _, o := range os {
		o.SlotsSkipped(n, reason)
	}
}

// EventType names a lease event.
type EventType string

// The lease events reported to Observer.LeaseEvent.
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
	// Reason says why, when the lease package gave one ("" otherwise).
	Reason string
	// At is when the worker saw the change (Config.Clock).
	At time.Time
}
