package lease

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Owner is an owner value taken apart. Owner values are
// "<holder>#<incarnation>.<nonce>" when the Manager was given an
// Incarnation, and "<holder>#<nonce>" otherwise (and in every value
// written before incarnations existed). Holder ids cannot contain '#'
// (keyspace.ValidateID) and incarnations contain only letters and digits,
// so both forms parse without ambiguity. The nonce is 16 random hex digits
// after 12 hex digits of the holder's clock (Unix ms) when the owner value
// was made, which is when its acquisition was sent: a lease's age for
// explain where the session's fencing record does not give its token
// (acquire.lua writes none before the session's first release). Values
// written before that have the 16 random digits alone.
type Owner struct {
	// Holder is the holder id (Config.Holder): the worker's node id.
	Holder string
	// Incarnation is the Config.Incarnation of the Manager that acquired
	// the lease, "" when it had none.
	Incarnation string
	// Nonce is the part unique to the acquisition.
	Nonce string
	// Made is when the holder made the owner value, by its clock (Unix
	// ms precision); zero when the value does not say.
	Made time.Time
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
	if len(o.Nonce) == madeDigits+16 {
		if ms, err := strconv.ParseInt(o.Nonce[:madeDigits], 16, 64); err == nil {
			o.Made = time.UnixMilli(ms)
		}
	}
	return o
}

// madeDigits is the number of hex digits of an owner value's time.
const madeDigits = 12

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

// newOwner returns a fresh owner value, unique per acquisition, made at
// made: holder#[incarnation.]<12 hex: made's Unix ms><16 random hex>.
func (m *Manager) newOwner(made time.Time) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read crashes the program instead
	ms := uint64(made.UnixMilli()) & (1<<(4*madeDigits) - 1)
	nonce := fmt.Sprintf("%0*x", madeDigits, ms) + hex.EncodeToString(b[:])
	if m.cfg.Incarnation == "" {
		return m.cfg.Holder + "#" + nonce
	}
	return m.cfg.Holder + "#" + m.cfg.Incarnation + "." + nonce
}
