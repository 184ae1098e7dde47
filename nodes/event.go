package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
)

// EventType says what an Event announces.
type EventType string

// The event types workers exchange.
const (
	// EventJoin: Node started heartbeating.
	EventJoin EventType = "join"
	// EventLeave: Node is shutting down and has left the index.
	EventLeave EventType = "leave"
	// EventRelease: Node released the leases of Sessions (of all its
	// sessions if Sessions is empty), so their new owners may take them now.
	EventRelease EventType = "release"
	// EventSessions: the session index changed; Sessions, if set, lists the
	// sessions that changed. Node is optional (a command-line tool may
	// publish it).
	EventSessions EventType = "sessions"
	// EventCordon: Node was cordoned or uncordoned (pollworker drain,
	// uncordon); every worker plans again.
	EventCordon EventType = "cordon"
	// EventProbe: a writer checking that it may publish on the channel
	// (CheckChannel); receivers ignore it.
	EventProbe EventType = "probe"
)

// ErrMalformedEvent is returned (wrapped) by DecodeEvent for a message that
// is not a valid Event.
var ErrMalformedEvent = errors.New("nodes: malformed event")

// Event is a message on the keyspace.Space.Events Pub/Sub channel. Events are
// hints that speed up reaction; a lost one only delays it.
type Event struct {
	// Type says what happened.
	Type EventType `json:"type"`
	// Node is the id of the worker the event is about; required except for
	// EventSessions.
	Node string `json:"node,omitempty"`
	// Sessions are the session ids concerned, if any.
	Sessions []string `json:"sessions,omitempty"`
}

// Encode returns e as JSON.
func (e Event) Encode() string {
	b, _ := json.Marshal(e) // cannot fail: strings and a slice of strings
	return string(b)
}

// Validate reports whether e has a known type, the node its type needs, and
// only valid ids.
func (e Event) Validate() error {
	switch e.Type {
	case EventJoin, EventLeave, EventRelease, EventCordon:
		if e.Node == "" {
			return fmt.Errorf("%w: %s event without node", ErrMalformedEvent, e.Type)
		}
	case EventSessions, EventProbe:
	default:
		return fmt.Errorf("%w: unknown type %q", ErrMalformedEvent, e.Type)
	}
	if e.Node != "" {
		if err := keyspace.ValidateID(e.Node); err != nil {
			return fmt.Errorf("%w: node: %w", ErrMalformedEvent, err)
		}
	}
	for _, s := range e.Sessions {
		if err := keyspace.ValidateID(s); err != nil {
			return fmt.Errorf("%w: session: %w", ErrMalformedEvent, err)
		}
	}
	return nil
}

// DecodeEvent parses and validates a message from the events channel.
// Unknown fields are ignored; unknown types are an error, which a receiver
// should log and skip.
func DecodeEvent(msg string) (Event, error) {
	var e Event
	if err := json.Unmarshal([]byte(msg), &e); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrMalformedEvent, err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// Publish validates e and publishes it on keys.Events().
func Publish(ctx context.Context, client redis.Cmdable, keys keyspace.Space, e Event) error {
	if err := e.Validate(); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if err := client.Publish(ctx, keys.Events(), e.Encode()).Err(); err != nil {
		return fmt.Errorf("publish %s event: %w", e.Type, err)
	}
	return nil
}

// CheckChannel checks that client may use the events channel of keys:
// publish on it (a probe event, which receivers ignore) and, with
// subscribe, subscribe to it. Workers hear session changes and their
// peers' releases on it: without it they would notice them only at their
// next full round, seconds later. A Redis ACL that does not grant the
// channel (NOPERM) is an error wrapping Redis's.
func CheckChannel(ctx context.Context, client redis.UniversalClient, keys keyspace.Space, subscribe bool) error {
	if err := Publish(ctx, client, keys, Event{Type: EventProbe}); err != nil {
		return err
	}
	if !subscribe {
		return nil
	}
	sub := client.Subscribe(ctx, keys.Events())
	defer func() { _ = sub.Close() }()
	if _, err := sub.Receive(ctx); err != nil {
		return fmt.Errorf("subscribe to %s: %w", keys.Events(), err)
	}
	return nil
}
