// Package keyspace builds every Redis key and channel name that pollworker
// uses, and validates the ids and prefixes that go into them.
//
// One function builds each kind of key, so the layout is defined in one
// place:
//
//	<prefix>:node:<node>          heartbeat of a worker (JSON, TTL)
//	<prefix>:nodes                sorted set of live workers scored by expiry (ms)
//	<prefix>:lease:{<session>}    lease of a session: owner value, PX TTL
//	<prefix>:fencing:{<session>}  fencing record: hash of the last token and the handoff mark (never expires)
//	<prefix>:fence:{<session>}    fencing counter of the layout before (read and deleted on upgrade)
//	<prefix>:released:{<session>} handoff mark of the layout before (read and deleted on upgrade)
//	<prefix>:events               Pub/Sub channel for releases and membership
//	<prefix>:sessions:<b>         set of the session ids of bucket b (the index)
//	<prefix>:{sessions}:rev       change counter of the sessions
//	<prefix>:{sessions}:changes   sorted set: bucket -> revision of its last change
//	<prefix>:{sessions}:sizes     hash: bucket -> number of ids in it
//	<prefix>:{sessions}:loads     hash: placement unit -> polls per day
//	<prefix>:epoch:{<tag>}        loss marker of one hash slot (never expires)
//	<prefix>:results              capped stream of poll results (one server, Sentinel)
//	<prefix>:results:<i>:{<tag>}  result stream i of 16, by bucket range (Cluster)
//	<prefix>:candidates:{<s>}     election: hash of the candidates of a role
//	<prefix>:candidate:{<s>}:<id> election: liveness of one candidate (PX TTL)
//	<prefix>:successor:{<s>}      election: preferred successor (PX TTL)
//	<sessionPrefix>:<session>     a session's JSON definition
//
// The braces around the session id are a Redis Cluster hash tag: the lease
// key and fencing record of one session always share a slot, so one script
// may touch both; so do the three change-tracking keys. An election role is
// the lease of the session "election:<role>" (<s> above), and its
// candidate keys carry the same tag, so they share that lease's slot.
//
// The two prefixes must name disjoint namespaces (Space.Validate, Overlap):
// with --session-prefix poll:sessions, session 7 would be stored at
// poll:sessions:7, the key of index bucket 7, and the index would break.
//
// The session index is split into SessionBuckets sets by BucketOf, so that
// a worker reads only the ids of the buckets it is assigned, not every id.
package keyspace

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/pollworker/pollworker/hrw"
)

// Defaults for the two prefixes.
const (
	DefaultPrefix        = "poll"
	DefaultSessionPrefix = "session"
	// MaxIDLen is the longest session or node id accepted.
	MaxIDLen = 200
)

// ErrInvalidID is returned (wrapped) for an id or prefix that would build an
// ambiguous or unsafe key.
var ErrInvalidID = errors.New("keyspace: invalid id")

// ErrOverlap is returned (wrapped) by Space.Validate for a key prefix and a
// session prefix whose keys can collide (see Overlap).
var ErrOverlap = errors.New("keyspace: prefixes overlap")

// IDError is the error of ValidateID: the id and the rule it breaks.
// errors.Is(err, ErrInvalidID) holds for it.
type IDError struct {
	// ID is the refused id (possibly long: quote it with %.64q).
	ID string
	// Reason says which rule ID breaks, without the "keyspace:" prefix,
	// e.g. `"a b" has byte ' ' at 1 (allowed: letters, digits, . _ - : @ /)`.
	Reason string
}

// Error returns "keyspace: invalid id: " and the reason.
func (e *IDError) Error() string { return ErrInvalidID.Error() + ": " + e.Reason }

// Unwrap returns ErrInvalidID.
func (e *IDError) Unwrap() error { return ErrInvalidID }

// Space names the keys of one pollworker deployment. The zero value uses the
// default prefixes "poll" and "session".
type Space struct {
	// Prefix is the namespace of worker keys; default "poll".
	Prefix string
	// SessionPrefix is the namespace of session definitions; default "session".
	SessionPrefix string
}

// New returns a Space with the given prefixes (empty means default) after
// validating them.
func New(prefix, sessionPrefix string) (Space, error) {
	s := Space{Prefix: prefix, SessionPrefix: sessionPrefix}
	if err := s.Validate(); err != nil {
		return Space{}, err
	}
	return s, nil
}

// Validate reports whether both prefixes are usable: each a valid id (see
// ValidateID; in particular no braces, so that a prefix never carries a
// Redis Cluster hash tag that would pull every key into one slot and
// override the {session} tag of the lease keys), and the two namespaces
// disjoint (see Overlap). Every constructor that takes a Space calls it.
func (s Space) Validate() error {
	if err := validatePart("key prefix", s.prefix()); err != nil {
		return err
	}
	if err := validatePart("session prefix", s.sessionPrefix()); err != nil {
		return err
	}
	if Overlap(s.prefix(), s.sessionPrefix()) {
		return fmt.Errorf("%w: key prefix %q and session prefix %q: %s", ErrOverlap, s.prefix(), s.sessionPrefix(), OverlapRule)
	}
	return nil
}

// OverlapRule is the rule Overlap checks, in words, for error messages.
const OverlapRule = `neither may equal the other or start with the other followed by ":"`

// Overlap reports whether a worker key prefix and a session prefix can
// build the same key. Every worker key starts with prefix+":" (the
// election's keys included), and every session key is sessionPrefix+":"
// followed by a session id, which may itself contain ':'. So the two
// namespaces are disjoint exactly when neither of prefix+":" and
// sessionPrefix+":" is a prefix of the other: "poll" and "pollx" are
// disjoint, while "poll" and "poll:sessions" are not (session 7 would be
// written at poll:sessions:7, index bucket 7), nor "session" and
// "session:poll" (session "poll:nodes" would be the node index).
func Overlap(prefix, sessionPrefix string) bool {
	a, b := prefix+":", sessionPrefix+":"
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

func (s Space) prefix() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// SessionNamespace is the session prefix in effect: SessionPrefix, or its
// default. Workers that read different ones do not see the same sessions.
func (s Space) SessionNamespace() string { return s.sessionPrefix() }

func (s Space) sessionPrefix() string {
	if s.SessionPrefix == "" {
		return DefaultSessionPrefix
	}
	return s.SessionPrefix
}

// Lease is the lease key of a session.
func (s Space) Lease(session string) string { return s.prefix() + ":lease:{" + session + "}" }

// LeaseMatch is the SCAN MATCH pattern of every lease key of the keyspace
// (for readers looking for leases of sessions no longer stored).
func (s Space) LeaseMatch() string {
	prefix, suffix := s.leaseAffixes()
	return prefix + "*" + suffix
}

// LeaseSession returns the session id of a lease key, ok false for a key
// that is not one of this keyspace's lease keys.
func (s Space) LeaseSession(key string) (session string, ok bool) {
	prefix, suffix := s.leaseAffixes()
	id, ok := strings.CutPrefix(key, prefix)
	if !ok || !strings.HasSuffix(id, suffix) {
		return "", false
	}
	return strings.TrimSuffix(id, suffix), true
}

// leaseAffixes are what a lease key puts before and after the session id.
func (s Space) leaseAffixes() (prefix, suffix string) {
	prefix, suffix, _ = strings.Cut(s.Lease("\x00"), "\x00")
	return prefix, suffix
}

// Fencing is the fencing record of a session, a hash that never expires:
// field FieldToken holds the last fencing token minted, field FieldHandoff
// the handoff mark of the last graceful release (see lease/doc.go). It
// shares the lease's slot, so one script reads and writes both.
func (s Space) Fencing(session string) string { return s.prefix() + ":fencing:{" + session + "}" }

// The fields of a fencing record (Fencing).
const (
	// FieldToken is the last fencing token minted (decimal).
	FieldToken = "token"
	// FieldHandoff is the handoff mark: "<token>:<release ms>:<until
	// ms>[:<next poll due ms>]" (Redis time), token being the released
	// lease's; it counts only while token is the record's and until has
	// not passed.
	FieldHandoff = "handoff"
)

// Fence is the fencing counter of a session in the layout before the
// fencing record (a string without TTL). acquire.lua reads it while the
// record has no token, so that an upgrade in place keeps tokens increasing,
// and deletes it once the record has one; nothing writes it any more.
func (s Space) Fence(session string) string { return s.prefix() + ":fence:{" + session + "}" }

// Released is the handoff mark of a session in the layout before the
// fencing record (a string with a PX: "<release ms>[:<next poll due
// ms>]"). acquire.lua honours it while the record has no token, and
// deletes it; nothing writes it any more.
func (s Space) Released(session string) string { return s.prefix() + ":released:{" + session + "}" }

// Epoch is the loss marker of the hash slot slot (0-16383): the run id of
// the Redis server that wrote it and the end of a quarantine after a data
// loss (see lease/doc.go). It lives in that slot (its hash tag is chosen
// for it), so that the acquire script reads the marker of the leases it
// takes in Redis Cluster too. Outside Cluster every lease uses slot 0's.
func (s Space) Epoch(slot uint16) string {
	return s.prefix() + ":epoch:{" + slotTags()[slot%16384] + "}"
}

// slotTags holds, for every hash slot, the shortest decimal hash tag that
// maps to it.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, 16384)
	left := len(tags)
	for n := 0; left > 0; n++ {
		tag := strconv.Itoa(n)
		if sl := crc16(tag) % 16384; tags[sl] == "" {
			tags[sl] = tag
			left--
		}
	}
	return tags
})

// Node is the heartbeat key of a worker.
func (s Space) Node(node string) string { return s.prefix() + ":node:" + node }

// Timeline is where a worker keeps its last minutes of polls, late polls,
// failures and leases for the status page's charts (internal/timeline): a
// capped list that expires when the worker stops writing it.
func (s Space) Timeline(node string) string { return s.prefix() + ":timeline:" + node }

// Failing is where a worker keeps the sessions it polls whose last poll
// failed, for every worker's status page (the failing table of the whole
// fleet): a string of JSON, rewritten with its timeline, that expires when
// the worker stops writing it.
func (s Space) Failing(node string) string { return s.prefix() + ":failing:" + node }

// NodeIndex is the sorted set of live workers, scored by expiry in ms.
func (s Space) NodeIndex() string { return s.prefix() + ":nodes" }

// Cordoned is the set of cordoned worker ids: live workers that take no
// sessions and hand off those they hold (pollworker drain).
func (s Space) Cordoned() string { return s.prefix() + ":cordoned" }

// Events is the Pub/Sub channel on which workers announce changes.
func (s Space) Events() string { return s.prefix() + ":events" }

// KeyNamespace is the key prefix in effect: Prefix, or its default.
func (s Space) KeyNamespace() string { return s.prefix() }

// SessionOwner is the key, in the session namespace, that names the key
// prefix whose sessions the namespace holds (session.ClaimNamespace): the
// definitions are read through one key prefix's index, so two key
// prefixes sharing one session prefix would rewrite and remove each
// other's. Its braces keep it apart from every session id.
func (s Space) SessionOwner() string { return s.sessionPrefix() + ":{owner}" }

// Session is the key holding a session's JSON definition.
func (s Space) Session(session string) string { return s.sessionPrefix() + ":" + session }

// SessionBuckets is the number of buckets the session index is split into.
// It is fixed: every worker and writer must agree on it.
const SessionBuckets = 16384

// BucketOf returns the index bucket of a session id (any string, valid or
// not), in [0, SessionBuckets).
func BucketOf(id string) int { return hrw.Bucket(id, SessionBuckets) }

// SessionBucket is the set of the session ids in bucket b.
func (s Space) SessionBucket(b int) string { return s.prefix() + ":sessions:" + strconv.Itoa(b) }

// SessionBucketOf is the index set that holds the session id.
func (s Space) SessionBucketOf(id string) string { return s.SessionBucket(BucketOf(id)) }

// SessionRev is the counter bumped on every change to a session.
func (s Space) SessionRev() string { return s.prefix() + ":{sessions}:rev" }

// SessionRecorded marks, for a while, that the change record of the write
// named write was written, holding the revision it got: a record retried
// after a lost reply is not counted twice. It shares SessionRev's slot.
func (s Space) SessionRecorded(write string) string {
	return s.prefix() + ":{sessions}:recorded:" + write
}

// SessionChanges is the sorted set of buckets scored by the revision
// (SessionRev) of their last change; it shares SessionRev's slot.
func (s Space) SessionChanges() string { return s.prefix() + ":{sessions}:changes" }

// SessionSizes is the hash of the number of ids in each bucket, kept by the
// writers; it shares SessionRev's slot.
func (s Space) SessionSizes() string { return s.prefix() + ":{sessions}:sizes" }

// SessionLoads is the hash of the poll load of each placement unit (polls
// per day of its active sessions), kept by the writers next to the sizes,
// with the field "complete" set once it counts every session; it shares
// SessionRev's slot.
func (s Space) SessionLoads() string { return s.prefix() + ":{sessions}:loads" }

// SessionSettings is the hash of the keyspace's session settings that
// operators set (session.Store.SetURLRule: field "url-rule").
func (s Space) SessionSettings() string { return s.prefix() + ":{sessions}:settings" }

// Results is the capped stream of poll results (the single-stream layout,
// outside Redis Cluster).
func (s Space) Results() string { return s.prefix() + ":results" }

// ResultStreams is the number of result streams of the sharded layout (in
// Redis Cluster). It is fixed: writers and readers must agree on it.
const ResultStreams = 16

// ResultStream is result stream i (0 to ResultStreams-1) of the sharded
// layout. It holds the results of the sessions of index buckets
// [i, i+1) × SessionBuckets/ResultStreams, and its hash tag puts it in the
// middle of the i-th sixteenth of the hash slots, so that the streams
// spread over the masters of a Cluster whose slots are split in ranges.
func (s Space) ResultStream(i int) string {
	const span = 16384 / ResultStreams
	i = ((i % ResultStreams) + ResultStreams) % ResultStreams
	return s.prefix() + ":results:" + strconv.Itoa(i) + ":{" + slotTags()[i*span+span/2] + "}"
}

// ResultStreamOf is the sharded result stream of a session: that of its
// bucket range.
func (s Space) ResultStreamOf(session string) string {
	return s.ResultStream(BucketOf(session) * ResultStreams / SessionBuckets)
}

// Candidates is the hash of the candidates of an election whose lease is
// that of session (id -> priority); it shares the lease's slot.
func (s Space) Candidates(session string) string {
	return s.prefix() + ":candidates:{" + session + "}"
}

// Candidate is the key that is live (PX one TTL) while candidate id of the
// election of session heartbeats; it shares the lease's slot.
func (s Space) Candidate(session, id string) string {
	return s.prefix() + ":candidate:{" + session + "}:" + id
}

// Successor holds the preferred successor of the election of session
// ("<id>#<random>", PX one TTL); it shares the lease's slot.
func (s Space) Successor(session string) string {
	return s.prefix() + ":successor:{" + session + "}"
}

// ValidateID reports whether id may be used as a session or node id: 1 to
// MaxIDLen bytes of ASCII letters, digits and . _ - : @ /, so that it can
// never contain glob characters, braces (hash tags), spaces or CR/LF.
func ValidateID(id string) error {
	if id == "" {
		return &IDError{ID: id, Reason: "empty"}
	}
	if len(id) > MaxIDLen {
		return &IDError{ID: id, Reason: fmt.Sprintf("%d bytes, at most %d", len(id), MaxIDLen)}
	}
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			what := fmt.Sprintf("byte %q", id[i])
			if id[i] >= utf8.RuneSelf { // not ASCII: the character, or the byte in hex
				what = fmt.Sprintf("byte 0x%02x", id[i])
				if r, _ := utf8.DecodeRuneInString(id[i:]); r != utf8.RuneError {
					what = fmt.Sprintf("%q (not ASCII)", r)
				}
			}
			return &IDError{ID: id, Reason: fmt.Sprintf("%q has %s at %d (allowed: letters, digits, . _ - : @ /)", id, what, i)}
		}
	}
	return nil
}

func validatePart(what, p string) error {
	if err := ValidateID(p); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func idByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	case c == '.', c == '_', c == '-', c == ':', c == '@', c == '/':
		return true
	}
	return false
}
