package session

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// httpURLRule is the rule HTTPURL checks, in words.
const httpURLRule = "must be an absolute http or https URL with a host"

// HTTPURL reports whether raw is a URL the built-in HTTP poller (package
// httppoll) can poll: an absolute http or https URL with a host. It is the
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
	}
	return nil
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
// then the store's URL check.
func (s *Store) validate(sess Session) error {
	if err := sess.Validate(); err != nil {
		return err
	}
	if s.checkURL == nil {
		return nil
	}
	err := s.checkURL(sess.URL)
	var fe *FieldError
	if err == nil || errors.As(err, &fe) {
		return err
	}
	return &FieldError{Field: "url", Reason: err.Error(), err: err}
}
