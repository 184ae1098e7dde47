package httppoll

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/pollworker/pollworker/hrw"
)

// StateVersion is the version of the State encoding this package writes
// (State.Version, JSON field "v"). DecodeState refuses other versions: a
// worker of an older release that meets a newer state starts the session
// afresh (one unconditional request) rather than misreading it.
const StateVersion = 1

// Bounds of what a State keeps, so that an encoded State stays well under
// a kilobyte plus the worker id (at most 1 KiB with the longest ETag).
const (
	// MaxETagBytes is the longest ETag kept; a longer one is not kept and
	// the next request is not conditional on it.
	MaxETagBytes = 256
	// MaxLastModifiedBytes is the longest Last-Modified kept (an HTTP date
	// has 29 bytes).
	MaxLastModifiedBytes = 64
	// MaxMessageBytes is the longest State.Message kept; a longer one is
	// cut.
	MaxMessageBytes = 300
)

// DefaultStateRefresh is the default of Config.StateRefresh.
const DefaultStateRefresh = time.Minute

// ErrState is wrapped by DecodeState's errors.
var ErrState = errors.New("httppoll: unreadable state")

// State is what the Poller keeps about one session between polls, across
// handoffs, in the session's fenced state record (poller.SessionState; the
// state package). It is small JSON; the field names below are the JSON
// names, and times are RFC 3339 in UTC.
//
// It is saved after a poll whose outcome an operator needs to see changed
// (status or error class, ETag, Last-Modified, body hash, consecutive
// failures), and otherwise when the saved one is Config.StateRefresh
// (60 s) old, so that LastSuccess, Latency, Polled and Worker are at most
// that stale: a session that keeps answering the same thing costs no
// Redis write per poll, and a handoff costs none either (the new holder
// saves at the first change or refresh).
type State struct {
	// Version ("v") is StateVersion.
	Version int `json:"v"`
	// Worker ("worker") is the worker that saved it: after a handoff, the
	// previous holder until the new one saves.
	Worker string `json:"worker"`
	// URLHash ("url_fnv") is the FNV-1a 64 hash of the URL polled, in hex:
	// a session whose URL changed (sessions add --replace) starts afresh,
	// so that no validator of another URL is ever sent.
	URLHash string `json:"url_fnv"`
	// Polled ("polled") is when the last saved poll started, on the saving
	// worker's clock.
	Polled time.Time `json:"polled"`
	// Status ("status") is the HTTP status of that poll; 0 when no
	// response arrived.
	Status int `json:"status"`
	// Error ("error") is the class of its failure: "" for none, else
	// "server" (an unexpected status of 500 or above), "status" (another
	// status the session does not expect, a 4xx by default), "timeout",
	// "refused", "reset", "dns", "tls", "profile" (not sent: the
	// session's profile is unknown on the worker, or a file of it cannot
	// be read), "redirect" (a redirect not followed) or "other".
	Error string `json:"error,omitempty"`
	// Message ("message") is the last poll's error message when it failed
	// ("httppoll: unexpected status: 401 Unauthorized (expect 200-399)",
	// "dial tcp 10.0.0.7:443: connect: connection refused"), at most
	// MaxMessageBytes; "" after a success. It never holds the URL (which
	// may hold credentials) nor a profile's secrets.
	Message string `json:"message,omitempty"`
	// LatencyMS ("latency_ms") is how long that poll took, in milliseconds.
	LatencyMS float64 `json:"latency_ms"`
	// ETag ("etag") and LastModified ("last_modified") are the validators
	// of the last response that carried them (at most MaxETagBytes and
	// MaxLastModifiedBytes); the next request sends them as If-None-Match
	// and If-Modified-Since. A 304 keeps them.
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	// BodySHA256 ("body_sha256") is the hex SHA-256 of the body of the
	// last 2xx answer (its first MaxBodyBytes); other answers keep the
	// previous one.
	BodySHA256 string `json:"body_sha256,omitempty"`
	// LastSuccess ("last_success") is when the last poll that did not fail
	// started (a status the session expects, 200-399 by default, 304
	// included); zero if none yet.
	LastSuccess time.Time `json:"last_success,omitzero"`
	// Failures ("failures") counts the polls that failed in a row (the
	// poll returned an error: no response, or a status the session does
	// not expect),
	// across handoffs; a poll that does not fail resets it.
	Failures int `json:"failures"`
	// FailingSince ("failing_since") is when the first of those failures
	// started; zero while Failures is 0.
	FailingSince time.Time `json:"failing_since,omitzero"`
	// Changed ("changed") is when the status, the error class, the ETag
	// or the body hash last changed (the first poll of a session sets
	// it); 200 and 304 count as the same status.
	Changed time.Time `json:"changed"`
	// BackoffMS ("backoff_ms") is how much longer than its interval the
	// coordinator waits after this many failures (Config.ErrorBackoff:
	// (2^min(k,5) - 1) × interval, at most ErrorBackoff, before a jitter
	// of ±5%); 0 without failures. The coordinator counts the failures of
	// its own lease: after a handoff the new holder backs off from 0 while
	// Failures goes on, so this is an upper bound then.
	BackoffMS int64 `json:"backoff_ms,omitempty"`
}

// DecodeState reads an encoded State. It returns an error wrapping
// ErrState for data that is not a State of StateVersion.
func DecodeState(data []byte) (State, error) {
	st, ok := decodeStateFast(data)
	if !ok {
		st = State{}
		if err := json.Unmarshal(data, &st); err != nil {
			return State{}, fmt.Errorf("%w: %w", ErrState, err)
		}
	}
	if st.Version != StateVersion {
		return State{}, fmt.Errorf("%w: version %d, this build reads %d", ErrState, st.Version, StateVersion)
	}
	return st, nil
}

// encode returns st as JSON.
func (st State) encode() []byte {
	b, err := json.Marshal(st)
	if err != nil { // only plain fields: cannot happen
		panic(fmt.Sprintf("httppoll: encode state: %v", err))
	}
	return b
}

// urlHash is State.URLHash of rawURL.
func urlHash(rawURL string) string {
	return strconv.FormatUint(hrw.HashKey(rawURL), 16) // FNV-1a 64
}

// hasURLHash reports whether hash is urlHash(rawURL), without allocating.
func hasURLHash(hash, rawURL string) bool {
	var buf [16]byte
	return string(strconv.AppendUint(buf[:0], hrw.HashKey(rawURL), 16)) == hash
}

// Latency is LatencyMS as a duration.
func (st State) Latency() time.Duration {
	return time.Duration(st.LatencyMS * float64(time.Millisecond))
}

// Backoff is BackoffMS as a duration.
func (st State) Backoff() time.Duration { return time.Duration(st.BackoffMS) * time.Millisecond }

// needsSave reports whether next differs from prev in something an
// operator needs to see at once, or prev is older than refresh.
func needsSave(prev, next State, hadPrev bool, refresh time.Duration) bool {
	return !hadPrev ||
		prev.Status != next.Status || prev.Error != next.Error ||
		prev.ETag != next.ETag || prev.LastModified != next.LastModified ||
		prev.BodySHA256 != next.BodySHA256 || prev.Failures != next.Failures ||
		next.Polled.Sub(prev.Polled) >= refresh
}
