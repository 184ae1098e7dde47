package nodes

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Labels are a worker's key=value labels (--labels zone=eu-1,egress=static),
// carried in its heartbeat (Info.Labels). A session's selector has the same
// form: it may be polled only by workers whose labels include every pair
// of it (Matches).
type Labels map[string]string

// Limits on labels and selectors.
const (
	// MaxLabels is the most pairs in one set of labels or one selector.
	MaxLabels = 16
	// MaxLabelLen is the longest key or value, in bytes.
	MaxLabelLen = 63
)

// ParseLabels parses "k=v,k2=v2" (spaces around pairs ignored; "" is no
// labels). Keys and values are 1 to MaxLabelLen letters, digits and
// . _ - /; a key appears once.
func ParseLabels(s string) (Labels, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	out := Labels{}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return nil, fmt.Errorf("label %q: want key=value", pair)
		}
		if err := validLabelPart(k); err != nil {
			return nil, fmt.Errorf("label %q: key: %w", pair, err)
		}
		if err := validLabelPart(v); err != nil {
			return nil, fmt.Errorf("label %q: value: %w", pair, err)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label key %q given twice", k)
		}
		out[k] = v
	}
	if len(out) > MaxLabels {
		return nil, fmt.Errorf("%d labels, more than %d", len(out), MaxLabels)
	}
	return out, nil
}

// Validate checks l as ParseLabels would.
func (l Labels) Validate() error {
	if len(l) > MaxLabels {
		return fmt.Errorf("%d labels, more than %d", len(l), MaxLabels)
	}
	for k, v := range l {
		if err := validLabelPart(k); err != nil {
			return fmt.Errorf("label key: %w", err)
		}
		if err := validLabelPart(v); err != nil {
			return fmt.Errorf("label %s: value: %w", k, err)
		}
	}
	return nil
}

func validLabelPart(s string) error {
	if s == "" || len(s) > MaxLabelLen {
		return fmt.Errorf("%q must have 1 to %d bytes", s, MaxLabelLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '_' || c == '-' || c == '/') {
			return fmt.Errorf("%q: letters, digits and . _ - / only", s)
		}
	}
	return nil
}

// String is the canonical form: pairs sorted by key, "k=v,k2=v2"; "" for
// none. Two selectors select the same workers iff their forms are equal.
func (l Labels) String() string {
	switch len(l) { // the common cases, without sorting (a session's selector is read at every plan)
	case 0:
		return ""
	case 1:
		for k, v := range l {
			return k + "=" + v
		}
	}
	keys := slices.Sorted(maps.Keys(l))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return strings.Join(parts, ",")
}

// Matches reports whether labels l satisfy selector sel: every pair of sel
// is in l. The empty selector matches every worker.
func (l Labels) Matches(sel Labels) bool {
	for k, v := range sel {
		if got, ok := l[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// CanonicalSelector returns the canonical form of a selector given as
// "k=v,…" ("" for none), or an error.
func CanonicalSelector(s string) (string, error) {
	l, err := ParseLabels(s)
	if err != nil {
		return "", err
	}
	return l.String(), nil
}

// MatchesSelector reports whether labels l satisfy the selector s (in any
// form ParseLabels accepts); an invalid selector matches nothing.
func (l Labels) MatchesSelector(s string) bool {
	sel, err := ParseLabels(s)
	return err == nil && l.Matches(sel)
}
