package lease

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/pollworker/pollworker/keyspace"
)

// ErrBadKey is matched (errors.Is) by every *BadKey.
var ErrBadKey = errors.New("lease: bad key")

// The roles of a session's keys in a BadKey.
const (
	RoleLease = "lease" // the lease key (Keys.Lease)
	// RoleFence is the fencing record (Keys.Fencing), or the fencing
	// counter of the layout before it (Keys.Fence), read while the record
	// has no token; BadKey.Key says which.
	RoleFence = "fence"
	// RoleMark was the handoff mark of the layout before the fencing
	// record (Keys.Released). The mark is now a field of the record, and
	// an old mark of the wrong type reads as none: no BadKey has it.
	RoleMark = "mark"
)

// roleOldFence is how the scripts name the fencing counter of the layout
// before the fencing record.
const roleOldFence = "oldfence"

// BadKey is a key of one session that the scripts cannot use: a key of
// the wrong type (an operator's or another program's), or a fencing
// token that is not a decimal integer below 2^53-1 (tokens are exact in
// Lua's doubles only up to there: a larger counter could mint one token
// twice) or is more than a year ahead of the server clock (no token
// acquire.lua minted is: a foreign write, which would run the slot's
// tokens up to 2^53-1). The session is never acquired while the key stays so; the other
// sessions of its batch are not affected, and the key is never deleted or
// overwritten (an operator may need it): repair or delete it by hand.
type BadKey struct {
	// Session is the session whose key it is.
	Session string `json:"session"`
	// Role is which of its keys: RoleLease, RoleFence or RoleMark.
	Role string `json:"role"`
	// Key is the key's name.
	Key string `json:"key"`
	// Problem says what is wrong, as the scripts report it: "wrong type
	// string", "not a decimal integer: ...", "at or above 2^53-1: ...",
	// "more than a year ahead of the server clock ...".
	Problem string `json:"problem"`
}

// Error says which key of which session is bad and why.
func (b *BadKey) Error() string {
	return fmt.Sprintf("lease: session %s: bad %s key %s: %s", b.Session, b.Role, b.Key, b.Problem)
}

// Is reports whether target is ErrBadKey.
func (b *BadKey) Is(target error) bool { return target == ErrBadKey }

// badPrefix starts the holder's place of a bad key in a script reply
// ("<bad:ROLE>").
const badPrefix = "<bad:"

// newBadKey returns the BadKey of session's key in role (as a script names
// it), nil for an unknown role.
func newBadKey(keys keyspace.Space, session, role, problem string) *BadKey {
	var key string
	switch role {
	case RoleLease:
		key = keys.Lease(session)
	case RoleFence:
		key = keys.Fencing(session)
	case roleOldFence:
		role, key = RoleFence, keys.Fence(session)
	default:
		return nil
	}
	return &BadKey{Session: session, Role: role, Key: key, Problem: problem}
}

// badRole returns the role in a reply's "<bad:ROLE>", or false.
func badRole(held string) (string, bool) {
	role, ok := strings.CutPrefix(held, badPrefix)
	if !ok {
		return "", false
	}
	return strings.TrimSuffix(role, ">"), true
}

// noteBad records that session b.Session was skipped for b, logging it
// the first time (and when the problem changes), not at every retry.
func (m *Manager) noteBad(b *BadKey) *BadKey {
	m.mu.Lock()
	delete(m.pending, b.Session) // nothing of ours was written
	prev := m.bad[b.Session]
	m.bad[b.Session] = b
	m.mu.Unlock()
	if prev == nil || *prev != *b {
		m.log.Error("session skipped: one of its keys cannot be used; repair or delete it by hand (pollworker never deletes it)",
			zap.String("session", b.Session), zap.String("event", "bad_key"), zap.String("key", b.Key),
			zap.String("role", b.Role), zap.String("problem", b.Problem))
	}
	return b
}

// noteGood forgets a bad key of session once an acquisition got past it.
func (m *Manager) noteGood(session string) {
	m.mu.Lock()
	b := m.bad[session]
	delete(m.bad, session)
	m.mu.Unlock()
	if b != nil {
		m.log.Info("bad key repaired", zap.String("session", session), zap.String("event", "bad_key_repaired"), zap.String("key", b.Key))
	}
}

// noteBadMarker reports loudly that a key of call c's slot's own was
// unusable and acquire.lua has overwritten it: the loss marker (with a
// fresh quarantine) or the token high-water mark (problem says which).
func (m *Manager) noteBadMarker(c *call, problem string) {
	m.mu.Lock()
	m.markerRepairs++
	m.mu.Unlock()
	key, _ := c.args[3+2*len(c.idx)].(string)  // after the sessions' keys
	high, _ := c.args[4+2*len(c.idx)].(string) // after the marker
	m.log.Error("a key of the slot's own was unusable and was overwritten: a loss marker of the wrong type with a fresh loss quarantine (acquisitions in its slot wait one quarantine, as after a data loss); a token high-water mark as if lost (tokens rest on the clock and the fencing records)",
		zap.String("event", "bad_loss_marker"), zap.String("key", key), zap.String("high_water_key", high), zap.String("problem", problem))
}

// BadKeys returns the sessions the last acquisitions skipped for a bad key
// (BadKey), sorted by session; a session leaves the list once an
// acquisition gets past its key (repaired by hand).
func (m *Manager) BadKeys() []BadKey {
	m.mu.Lock()
	out := make([]BadKey, 0, len(m.bad))
	for _, b := range m.bad {
		out = append(out, *b)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b BadKey) int { return strings.Compare(a.Session, b.Session) })
	return out
}

// MarkerRepairs is how many acquisition calls of this manager overwrote an
// unusable key of a slot's own: a loss marker of the wrong type (with a
// fresh quarantine) or a token high-water mark of the wrong type or value.
func (m *Manager) MarkerRepairs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.markerRepairs
}
