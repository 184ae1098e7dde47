package session

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// httpURLRule is the rule HTTPURL checks, in words.
const httpURLRule = "must be an absolute http or https URL with a host"

// HTTPURL reports whether raw is a URL the built-in HTTP poller (package
// httppoll) can poll: an absolute http or https URL with a host, a port
// from 1 to 65535 if it has one, and no credentials (they belong in a
// worker-side profile, out of Redis). It is the
// default URL check of a Store (see WithURLCheck). Its errors are
// *FieldError for the field "url"; they name the scheme, never the URL,
// which may hold a password.
func HTTPURL(raw string) error {
	if strings.TrimSpace(raw) == "" {
		return &FieldError{Field: "url", Reason: "missing or blank"}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return &FieldError{Field: "url", Reason: fmt.Sprintf("%s; it does not parse: %v", httpURLRule, urlReason(err))}
	case u.Scheme == "":
		return &FieldError{Field: "url", Reason: httpURLRule + "; it has no scheme"}
	case u.Scheme != "http" && u.Scheme != "https":
		return &FieldError{Field: "url", Reason: fmt.Sprintf("%s; its scheme is %.20q", httpURLRule, u.Scheme)}
	case u.Host == "" || u.Hostname() == "":
		return &FieldError{Field: "url", Reason: httpURLRule + "; it has no host"}
	case u.User != nil:
		return &FieldError{Field: "url", Reason: "holds credentials (user@ or user:password@ before the host): " +
			"put them in a worker-side profile (--profiles, basic_auth), which keeps them out of Redis"}
	case !validPort(u.Port()):
		return &FieldError{Field: "url", Reason: fmt.Sprintf("%s; its port %.20q is not 1-65535", httpURLRule, u.Port())}
	}
	return nil
}

// validPort reports whether p, the port of a URL ("" when it has none), is
// empty or a number from 1 to 65535.
func validPort(p string) bool {
	if p == "" {
		return true
	}
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}

// WithURLCheck sets the check that Put and PutMany apply to the URL of
// every session they write, after Session.Validate; a failed check wraps
// ErrMalformed and nothing is written. The default is HTTPURL, what the
// built-in HTTP poller can poll. Embedders whose Poller reads URL as
// something else pass their own check, or nil to accept any non-blank
// target (Session.Validate's rule). Reads never apply it: a worker polls
// what it finds.
func WithURLCheck(check func(url string) error) Option {
	return func(s *Store) { s.checkURL = check }
}

// validate is what Put and PutMany check before writing sess: Validate,
// then checkURL (see writeCheck), if not nil.
func validate(sess Session, checkURL func(string) error) error {
	if err := sess.ValidateForWrite(); err != nil {
		return err
	}
	if checkURL == nil {
		return nil
	}
	err := checkURL(sess.URL)
	var fe *FieldError
	if err == nil || errors.As(err, &fe) {
		return err
	}
	return &FieldError{Field: "url", Reason: err.Error(), err: err}
}

// URLRule is a keyspace's rule for the URL of the sessions written to it
// through a Store made with WithKeyspaceURLRule, kept in Redis
// (keyspace.Space.SessionSettings) so that every operator and tool
// writing to the keyspace applies the same one.
type URLRule string

// The URL rules.
const (
	// URLRuleHTTP accepts what the built-in HTTP poller can GET (HTTPURL):
	// the rule of a keyspace that has none set.
	URLRuleHTTP URLRule = "http"
	// URLRuleAny accepts any non-blank target (Session.Validate's rule),
	// for embedders whose Poller reads URL as something else
	// (serial:/dev/ttyUSB0, say).
	URLRuleAny URLRule = "any"
)

// urlRuleField is the field of keyspace.Space.SessionSettings that holds
// the URLRule.
const urlRuleField = "url-rule"

// ErrBadURLRule is returned (wrapped) for a URL rule that is neither http
// nor any, given or stored.
var ErrBadURLRule = errors.New("session: url rule must be http or any")

// ParseURLRule returns the rule named s ("http" or "any").
func ParseURLRule(s string) (URLRule, error) {
	switch r := URLRule(s); r {
	case URLRuleHTTP, URLRuleAny:
		return r, nil
	}
	return "", fmt.Errorf("%w, got %.20q", ErrBadURLRule, s)
}

// Check is the URL check of r: HTTPURL for URLRuleHTTP, nil (no check
// beyond Session.Validate) for URLRuleAny.
func (r URLRule) Check() func(url string) error {
	if r == URLRuleAny {
		return nil
	}
	return HTTPURL
}

// WithKeyspaceURLRule makes Put and PutMany apply the URL rule stored in
// the keyspace (see URLRule; URLRuleHTTP when none is set) instead of the
// check of WithURLCheck: one HGET per call. A stored value that is not a
// rule refuses every write (ErrBadURLRule) until it is set again.
func WithKeyspaceURLRule() Option {
	return func(s *Store) { s.keyspaceRule = true }
}

// URLRule reads the keyspace's URL rule: URLRuleHTTP when none is set,
// ErrBadURLRule (wrapped) when the stored value is not a rule.
func (s *Store) URLRule(ctx context.Context) (URLRule, error) {
	v, err := s.client.HGet(ctx, s.keys.SessionSettings(), urlRuleField).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return URLRuleHTTP, nil
	case err != nil:
		return "", fmt.Errorf("read url rule: %w", err)
	}
	r, err := ParseURLRule(v)
	if err != nil {
		return "", fmt.Errorf("read url rule: stored value: %w", err)
	}
	return r, nil
}

// SetURLRule stores r as the keyspace's URL rule. It applies to later
// writes only: the sessions stored are neither checked nor changed.
func (s *Store) SetURLRule(ctx context.Context, r URLRule) error {
	if _, err := ParseURLRule(string(r)); err != nil {
		return fmt.Errorf("set url rule: %w", err)
	}
	if err := s.client.HSet(ctx, s.keys.SessionSettings(), urlRuleField, string(r)).Err(); err != nil {
		return fmt.Errorf("set url rule: %w", err)
	}
	return nil
}

// writeCheck is the URL check of the next write: the keyspace's rule with
// WithKeyspaceURLRule, else the store's check.
func (s *Store) writeCheck(ctx context.Context) (func(string) error, error) {
	if !s.keyspaceRule {
		return s.checkURL, nil
	}
	r, err := s.URLRule(ctx)
	if err != nil {
		return nil, err
	}
	return r.Check(), nil
}
