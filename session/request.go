package session

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The request fields of a Session (Method, Headers, Body, Expect, Profile,
// Timeout) say how the built-in HTTP poller asks: targets say what to poll, and a
// worker-side profile (Profile) holds the credentials and TLS settings,
// which never enter Redis.

// Methods are the HTTP methods a session may use; "" means GET.
var Methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}

// DefaultExpect is the statuses that count as success when Expect is "".
const DefaultExpect = "200-399"

// Limits of the request fields.
const (
	// MaxHeaders is the most headers a session may set.
	MaxHeaders = 32
	// MaxProfileBytes is the longest profile name: a worker announces
	// each of its profiles as a label "profile/<name>" of at most 63
	// bytes.
	MaxProfileBytes = 48
	// MinTimeout and MaxTimeout bound a session's Timeout (as they bound
	// the worker's --poll-timeout).
	MinTimeout = 10 * time.Millisecond
	MaxTimeout = 5 * time.Minute
)

// reservedHeaders may not be set by a session: the fencing headers
// (X-Poll-*) are always the worker's; the others are the transport's, and
// Authorization belongs in a worker-side profile.
var reservedHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection",
	"Authorization", "Proxy-Authorization"}

// ReservedHeader says why a session may not set header name, or "" if it
// may. Names compare case-insensitively.
func ReservedHeader(name string) string {
	if len(name) >= len("X-Poll-") && strings.EqualFold(name[:len("X-Poll-")], "X-Poll-") {
		return "is a fencing header the worker always sends (X-Poll-*)"
	}
	for _, r := range reservedHeaders {
		if strings.EqualFold(name, r) {
			if r == "Authorization" || r == "Proxy-Authorization" {
				return "holds credentials: put it in a worker-side profile (--profiles), which keeps it out of Redis"
			}
			return "is set by the HTTP transport"
		}
	}
	return ""
}

// MethodOrGet is s.Method, or "GET" when it is empty.
func (s Session) MethodOrGet() string {
	if s.Method == "" {
		return "GET"
	}
	return s.Method
}

// ExpectOrDefault is s.Expect, or DefaultExpect when it is empty.
func (s Session) ExpectOrDefault() string {
	if s.Expect == "" {
		return DefaultExpect
	}
	return s.Expect
}

// Expected reports whether status counts as success for s (Expect, or
// DefaultExpect). It does not allocate; an invalid Expect, which Validate
// refuses, matches nothing.
func (s Session) Expected(status int) bool {
	return ExpectMatch(s.ExpectOrDefault(), status)
}

// ExpectMatch reports whether status is in expect, a list of codes and
// ranges ("200-299,304"). It does not allocate.
func ExpectMatch(expect string, status int) bool {
	for expect != "" {
		var part string
		part, expect, _ = strings.Cut(expect, ",")
		lo, hi, err := expectRange(strings.TrimSpace(part))
		if err == nil && status >= lo && status <= hi {
			return true
		}
	}
	return false
}

// CanonicalExpect checks expect ("200-299,304") and returns it without
// spaces; "" stays "" (DefaultExpect applies).
func CanonicalExpect(expect string) (string, error) {
	expect = strings.ReplaceAll(strings.TrimSpace(expect), " ", "")
	if expect == "" {
		return "", nil
	}
	for _, part := range strings.Split(expect, ",") {
		if _, _, err := expectRange(part); err != nil {
			return "", err
		}
	}
	return expect, nil
}

// expectRange reads "304" or "200-299".
func expectRange(part string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(part, "-")
	if lo, err = statusCode(a); err != nil {
		return 0, 0, err
	}
	hi = lo
	if isRange {
		if hi, err = statusCode(b); err != nil {
			return 0, 0, err
		}
		if hi < lo {
			return 0, 0, fmt.Errorf("range %q ends below its start", part)
		}
	}
	return lo, hi, nil
}

func statusCode(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 599 || len(s) != 3 {
		return 0, fmt.Errorf("%q is not a status code from 100 to 599 (want codes and ranges like 200-299,304)", s)
	}
	return n, nil
}

// validProfileName checks a profile name: letters, digits and . _ -, at
// most MaxProfileBytes.
func validProfileName(name string) error {
	if len(name) > MaxProfileBytes {
		return fmt.Errorf("is longer than %d bytes", MaxProfileBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%.40q may hold only letters, digits and . _ -", name)
		}
	}
	return nil
}

// ValidProfileName reports whether name may name a profile (letters,
// digits and . _ -, at most MaxProfileBytes), or why not.
func ValidProfileName(name string) error {
	if name == "" {
		return fmt.Errorf("is empty")
	}
	return validProfileName(name)
}

// ValidHeaderName reports whether name is an HTTP token (RFC 9110).
func ValidHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// ValidHeaderValue reports whether v may be sent as a header value: no
// control characters but tab.
func ValidHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// validateRequest checks the request fields of s.
func (s Session) validateRequest() error {
	if s.Method != "" && !slices.Contains(Methods, s.Method) {
		return &FieldError{Field: "method", Reason: fmt.Sprintf("%.20q is not one of %s", s.Method, strings.Join(Methods, ", "))}
	}
	if len(s.Headers) > MaxHeaders {
		return &FieldError{Field: "headers", Reason: fmt.Sprintf("%d headers, more than %d", len(s.Headers), MaxHeaders)}
	}
	var names []string
	if len(s.Headers) > 0 { // sorted for the same first error every time; none is the common case
		names = slices.Sorted(maps.Keys(s.Headers))
	}
	for _, name := range names {
		switch {
		case !ValidHeaderName(name):
			return &FieldError{Field: "headers", Reason: fmt.Sprintf("%.40q is not a valid header name", name)}
		case ReservedHeader(name) != "":
			return &FieldError{Field: "headers", Reason: fmt.Sprintf("%s %s", name, ReservedHeader(name))}
		case !ValidHeaderValue(s.Headers[name]):
			return &FieldError{Field: "headers", Reason: fmt.Sprintf("the value of %s holds a control character", name)}
		}
	}
	if s.Body != "" {
		switch s.MethodOrGet() {
		case "GET", "HEAD":
			return &FieldError{Field: "body", Reason: fmt.Sprintf("is not sent with %s: use method POST, PUT, PATCH or DELETE", s.MethodOrGet())}
		}
	}
	if _, err := CanonicalExpect(s.Expect); err != nil {
		return &FieldError{Field: "expect", Reason: err.Error()}
	}
	if s.Profile != "" {
		if err := validProfileName(s.Profile); err != nil {
			return &FieldError{Field: "profile", Reason: err.Error()}
		}
	}
	return s.validateTimeout()
}

// validateTimeout checks Timeout: none, or from MinTimeout to MaxTimeout
// and at most the interval.
func (s Session) validateTimeout() error {
	switch t := s.Timeout.D(); {
	case t == 0:
	case t < MinTimeout || t > MaxTimeout:
		return &FieldError{Field: "timeout", Reason: fmt.Sprintf("%v is not from %v to %v", t, MinTimeout, MaxTimeout)}
	case s.Interval > 0 && t > s.Interval.D():
		return &FieldError{Field: "timeout", Reason: fmt.Sprintf("%v is longer than the interval %v: a poll never lasts longer than its interval", t, s.Interval.D())}
	}
	return nil
}

// SameRequest reports whether s and o send the same request: method,
// headers, body, expect, profile and timeout.
func (s Session) SameRequest(o Session) bool {
	return s.MethodOrGet() == o.MethodOrGet() && maps.Equal(s.Headers, o.Headers) && s.Body == o.Body &&
		s.ExpectOrDefault() == o.ExpectOrDefault() && s.Profile == o.Profile && s.Timeout == o.Timeout
}
