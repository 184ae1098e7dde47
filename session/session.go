package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/nodes"
)

// Limits on a session.
const (
	// MinInterval is the shortest Interval accepted.
	MinInterval = 10 * time.Millisecond
	// MaxInterval is the longest Interval accepted. A graceful handoff
	// keeps a session's schedule, but a worker that acquires a lease left
	// to expire (a crash) polls at once, so an interval of days would not
	// be honoured reliably, and one like 100000h is a typo. Poll less often
	// than daily with a cron job instead.
	MaxInterval = 24 * time.Hour
	// MaxValueBytes is the largest encoded session accepted, in bytes.
	MaxValueBytes = 64 << 10
)

// ErrMalformed is returned (wrapped) for a session that fails validation;
// the wrapping error says what is wrong.
var ErrMalformed = errors.New("session: malformed")

// FieldError is the error of Validate and of a Store's URL check: the field
// that breaks a rule and the rule. errors.Is(err, ErrMalformed) holds for
// it, and errors.Is(err, keyspace.ErrInvalidID) for a bad id.
type FieldError struct {
	// Field is "id", "url", "interval", "selector", "method", "headers",
	// "body", "expect", "profile", or one of the schedule's: "schedule",
	// "tz", "jitter", "catchup", "catchup_window".
	Field string
	// Reason says which rule the field breaks, e.g. "1ms is below the
	// minimum 10ms". It never quotes the URL, which may hold a password.
	Reason string
	err    error
}

// Error returns "session: malformed: <field> <reason>".
func (e *FieldError) Error() string { return ErrMalformed.Error() + ": " + e.Field + " " + e.Reason }

// Is reports whether target is ErrMalformed.
func (e *FieldError) Is(target error) bool { return target == ErrMalformed }

// Unwrap returns the cause, if any (a *keyspace.IDError for the id).
func (e *FieldError) Unwrap() error { return e.err }

// Session is one polling job.
type Session struct {
	// ID names the session; see keyspace.ValidateID for the allowed bytes.
	ID string `json:"id"`
	// URL is what the built-in HTTP poller GETs: an absolute http or https
	// URL with a host (HTTPURL), which a Store requires by default.
	// Embedders whose Poller reads it as something else may store any
	// non-blank target through a Store made with WithURLCheck(nil).
	URL string `json:"url"`
	// Interval is the time between the starts of two polls, from
	// MinInterval to MaxInterval. A session has exactly one of Interval
	// and Schedule.
	Interval Duration `json:"interval,omitempty"`
	// Paused sessions are kept but polled by nobody.
	Paused bool `json:"paused,omitempty"`
	// Labels are free-form metadata handed to the poll.
	Labels map[string]string `json:"labels,omitempty"`
	// Selector, if set ("zone=eu-1,egress=static", see nodes.ParseLabels),
	// restricts the session to workers whose labels include every pair of
	// it: it is placed only among them and polled by no other worker. A
	// session no live worker matches is polled by nobody (and reported).
	Selector string `json:"selector,omitempty"`

	// Method is the HTTP method of the built-in poller's request: one of
	// Methods; "" means GET.
	Method string `json:"method,omitempty"`
	// Headers are sent with every request. They are stored in Redis and
	// shown by sessions get: only for values that are not secret
	// (credentials go in a worker-side Profile). ReservedHeader names those
	// a session may not set (the fencing headers X-Poll-* among them).
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the request body, sent with POST, PUT, PATCH or DELETE; its
	// Content-Type comes from Headers.
	Body string `json:"body,omitempty"`
	// Expect lists the statuses that count as success, codes and ranges
	// ("200-299,304"); "" means DefaultExpect (200-399). Any other status
	// fails the poll.
	Expect string `json:"expect,omitempty"`
	// Profile names a worker-side profile (credentials, TLS settings) that
	// the worker polling the session applies; "" for none. A worker that
	// does not have it does not poll the session and says why.
	Profile string `json:"profile,omitempty"`
	// Timeout is how long the built-in poller waits for the response
	// (a connection and a slot of the host included) before it gives up
	// the poll; 0 means the worker's (pollworker run --poll-timeout). From
	// MinTimeout to MaxTimeout, and at most the Interval: a poll never
	// lasts longer than its interval.
	Timeout Duration `json:"timeout,omitempty"`

	// Schedule, instead of Interval, polls the session at the slots of a
	// cron expression: 5 fields, or 6 with seconds first, or a descriptor
	// (@hourly, @daily, @weekly, @monthly, @every 90s), with H for a value
	// picked by the id's hash (see package schedule). Each slot is polled
	// once by the fleet, at or after its time, with its time in the
	// X-Poll-Slot header.
	Schedule string `json:"schedule,omitempty"`
	// TZ is the IANA zone the Schedule is read in ("" is UTC).
	TZ string `json:"tz,omitempty"`
	// Jitter, if set, starts every slot the same offset in [0, Jitter)
	// later, picked by the id's hash, to spread sessions sharing a
	// schedule. At most schedule.MaxJitter.
	Jitter Duration `json:"jitter,omitempty"`
	// CatchUp is what a holder does with slots nobody ran (an outage of
	// the whole fleet, a failover, a data loss): "skip", "latest" (the
	// default: the most recent once) or "all" (each, in order), within
	// CatchUpWindow.
	CatchUp string `json:"catchup,omitempty"`
	// CatchUpWindow bounds catch-up: slots due longer ago are never run
	// (0 is schedule.DefaultWindow, one hour; at most MaxCatchUpWindow).
	CatchUpWindow Duration `json:"catchup_window,omitempty"`
}

// SelectorKey is the canonical form of the session's selector (pairs sorted
// by key; "" for none, or when invalid, which Validate rejects).
func (s Session) SelectorKey() string {
	c, err := nodes.CanonicalSelector(s.Selector)
	if err != nil {
		return ""
	}
	return c
}

// Validate reports whether s may be stored and polled: a valid id, a
// non-blank URL (which, when it starts with http:// or https://, must parse
// as a URL with a host; any other non-blank target passes here, and a
// Store's URL check, HTTPURL by default, decides), either an Interval
// from MinInterval to MaxInterval or a Schedule that package schedule
// parses (with its TZ, Jitter, CatchUp and CatchUpWindow), never both, a
// valid selector, and request fields the built-in poller can send (method,
// headers, body, expect, profile; see ReservedHeader). Errors are
// *FieldError, wrap ErrMalformed and never quote the URL, which may hold a
// password.
func (s Session) Validate() error {
	if err := keyspace.ValidateID(s.ID); err != nil {
		reason := err.Error()
		if ie := (*keyspace.IDError)(nil); errors.As(err, &ie) {
			reason = ie.Reason
		}
		return &FieldError{Field: "id", Reason: reason, err: err}
	}
	if err := validateURL(s.URL); err != nil {
		return err
	}
	if err := s.validateTiming(); err != nil {
		return err
	}
	if _, err := nodes.CanonicalSelector(s.Selector); err != nil {
		return &FieldError{Field: "selector", Reason: err.Error()}
	}
	return s.validateRequest()
}

// Encode validates s and returns its JSON, at most MaxValueBytes long.
func Encode(s Session) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(b) > MaxValueBytes {
		return nil, fmt.Errorf("%w: encoded session has %d bytes, more than %d", ErrMalformed, len(b), MaxValueBytes)
	}
	return b, nil
}

func validateURL(u string) error {
	t := strings.TrimSpace(u)
	if t == "" {
		return &FieldError{Field: "url", Reason: "missing or blank"}
	}
	scheme, _, ok := strings.Cut(t, "://")
	if !ok || !(strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https")) {
		return nil // not HTTP: any non-blank target
	}
	p, err := url.Parse(u)
	if err != nil {
		return &FieldError{Field: "url", Reason: fmt.Sprintf("is not a valid %s URL: %v", strings.ToLower(scheme), urlReason(err))}
	}
	if p.Host == "" {
		return &FieldError{Field: "url", Reason: fmt.Sprintf("is an %s URL without host", strings.ToLower(scheme))}
	}
	return nil
}

// urlReason is url.Parse's error without the URL, which url.Error quotes
// whole, password included.
func urlReason(err error) error {
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Duration is a time.Duration that encodes to JSON as a Go duration string
// ("5s") and decodes from such a string or from a number of milliseconds.
type Duration time.Duration

// MarshalJSON encodes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts "1.5s" or 1500 (milliseconds); null leaves d
// unchanged, as encoding/json does for other types.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if len(b) >= 2 && b[len(b)-1] == '"' && !bytes.ContainsAny(b[1:len(b)-1], `"\`) {
			// The usual "30s": json.Unmarshal has checked the token, and
			// without escapes its text is the string (no second decode).
			s = string(b[1 : len(b)-1])
		} else if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("interval: %w", err)
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("interval: %w", err)
		}
		*d = Duration(v)
		return nil
	}
	var ms float64
	if err := json.Unmarshal(b, &ms); err != nil {
		return fmt.Errorf("interval: want a duration string or milliseconds, got %s", truncate(b, 40))
	}
	ns := ms * float64(time.Millisecond)
	if ns >= math.MaxInt64 || ns < math.MinInt64 {
		return fmt.Errorf("interval: %s milliseconds is out of range", truncate(b, 40))
	}
	*d = Duration(time.Duration(ns))
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
