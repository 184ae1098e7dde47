package httppoll

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRedirects is the most redirects a poll follows.
const MaxRedirects = 5

// RedirectError is returned (wrapped) by a poll whose redirects were not
// followed: more than MaxRedirects, a loop, a change of scheme, or
// another host for a session with a profile (its credentials would follow).
// The poll fails once, whatever the chain.
type RedirectError struct {
	// Reason says which rule stopped it.
	Reason string
}

// Error names the rule.
func (e *RedirectError) Error() string { return "httppoll: redirect not followed: " + e.Reason }

// profileKey is the context key of a request's profile name.
type profileKey struct{}

// checkRedirect is the CheckRedirect of the Poller's clients: at most
// MaxRedirects, never to another scheme, never to a URL already visited
// (a loop costs one request per URL in it, then fails), and for a session
// with a profile never to another host.
func checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	switch {
	case len(via) > MaxRedirects:
		return &RedirectError{Reason: fmt.Sprintf("more than %d redirects", MaxRedirects)}
	case !strings.EqualFold(req.URL.Scheme, first.Scheme):
		return &RedirectError{Reason: fmt.Sprintf("from %s to %s", first.Scheme, req.URL.Scheme)}
	}
	to := req.URL.String()
	for _, v := range via {
		if v.URL.String() == to {
			return &RedirectError{Reason: fmt.Sprintf("a loop (after %d requests)", len(via))}
		}
	}
	if name, _ := req.Context().Value(profileKey{}).(string); name != "" && !strings.EqualFold(req.URL.Host, first.Host) {
		return &RedirectError{Reason: fmt.Sprintf("to another host, which profile %s's credentials would follow", name)}
	}
	return nil
}

// withProfile marks ctx's request as sent with profile name (checkRedirect).
func withProfile(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, profileKey{}, name)
}

// retryAfter reads a Retry-After value, seconds or an HTTP date, as a
// delay from now bounded by max; 0 when absent, unreadable, in the past or
// max is negative.
func retryAfter(v string, now time.Time, max time.Duration) time.Duration {
	if v == "" || max < 0 {
		return 0
	}
	var d time.Duration
	secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if errors.Is(err, strconv.ErrRange) && secs > 0 {
		err = nil // delay-seconds beyond int64: the longest wait
	}
	if err == nil {
		if secs <= 0 {
			return 0
		}
		d = time.Duration(min(secs, int64(max/time.Second)+1)) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	if d <= 0 {
		return 0
	}
	return min(d, max)
}
