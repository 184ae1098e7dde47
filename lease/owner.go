package lease

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
)

// Owner is an owner value taken apart. Owner values are
// "<holder>#<incarnation>.<16 hex digits>" when the Manager was given an
// Incarnation, and "<holder>#<16 hex digits>" otherwise (and in every value
// written before incarnations existed). Holder ids cannot contain '#'
// (keyspace.ValidateID) and incarnations contain only letters and digits,
// so both forms parse without ambiguity.
type Owner struct {
	// Holder is the holder id (Config.Holder): the worker's node id.
	Holder string
	// Incarnation is the Config.Incarnation of the Manager that acquired
	// the lease, "" when it had none.
	Incarnation string
	// Nonce is the random part, unique to the acquisition.
	Nonce string
}

// ParseOwner takes an owner value apart; a value without '#' is all
// Holder.
func ParseOwner(owner string) Owner {
	i := strings.LastIndexByte(owner, '#')
	if i < 0 {
		return Owner{Holder: owner}
	}
	o := Owner{Holder: owner[:i], Nonce: owner[i+1:]}
	if inc, nonce, ok := strings.Cut(o.Nonce, "."); ok {
		o.Incarnation, o.Nonce = inc, nonce
	}
	return o
}

// HolderOf returns the holder id encoded in an owner value.
func HolderOf(owner string) string { return ParseOwner(owner).Holder }

// IncarnationOf returns the incarnation encoded in an owner value, "" when
// it has none.
func IncarnationOf(owner string) string { return ParseOwner(owner).Incarnation }

// validateIncarnation accepts "" or 1 to 64 letters and digits (the shape
// of nodes.NewIncarnation's values).
func validateIncarnation(s string) error {
	if len(s) > 64 {
		return fmt.Errorf("Incarnation %q: at most 64 letters or digits", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return fmt.Errorf("Incarnation %q: only letters and digits", s)
		}
	}
	return nil
}

// newOwner returns a fresh owner value: holder#[incarnation.]<16 hex>,
// unique per acquisition.
func (m *Manager) newOwner() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read crashes the program instead
	if m.cfg.Incarnation == "" {
		return m.cfg.Holder + "#" + hex.EncodeToString(b[:])
	}
	return m.cfg.Holder + "#" + m.cfg.Incarnation + "." + hex.EncodeToString(b[:])
}
