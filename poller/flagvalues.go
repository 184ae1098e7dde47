package poller

import (
	"fmt"
	"strconv"
	"time"

	"github.com/pollworker/pollworker/nodes"
)

// The flag.Values of RegisterFlags, each bound to one field of a Config.
// They follow Config's zero rule: "0" (or nothing) is the default, which
// String shows in words, and where a setting can be turned off "off" (or
// a negative number) sets Off. Each is also a flag.Getter.

// numberValue is an int or time.Duration field.
type numberValue[T int | time.Duration] struct {
	p      *T
	zero   string // the default, shown for 0
	off    bool   // "off" sets Off
	parse  func(string) (T, error)
	format func(T) string
	kind   string // what parse reads, for its error: "duration"
}

// durationValue binds a time.Duration field.
func durationValue(p *time.Duration, zero string, off bool) *numberValue[time.Duration] {
	return &numberValue[time.Duration]{p: p, zero: zero, off: off, parse: time.ParseDuration, format: time.Duration.String, kind: "duration"}
}

// intValue binds an int field.
func intValue(p *int, zero string, off bool) *numberValue[int] {
	return &numberValue[int]{p: p, zero: zero, off: off, parse: strconv.Atoi, format: strconv.Itoa, kind: "whole number"}
}

func (v *numberValue[T]) Set(s string) error {
	if v.off && s == "off" {
		*v.p = Off
		return nil
	}
	n, err := v.parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a %s%s", s, v.kind, map[bool]string{true: " or off"}[v.off])
	}
	switch {
	case v.off && n == 0:
		// Before the one zero rule, 0 turned these off; it would now
		// silently take the default. Refused, so no deployment changes
		// behaviour unnoticed.
		return fmt.Errorf("0 is ambiguous: off turns it off; leave it unset for the default (%s)", v.zero)
	case v.off && n < 0:
		// Off in Go; on a command line most likely a typo (a minus too
		// many), which would lift the bound unnoticed.
		return fmt.Errorf("%s is negative: off turns it off; leave it unset for the default (%s)", s, v.zero)
	}
	*v.p = n
	return nil
}

func (v *numberValue[T]) String() string {
	switch {
	case v.p == nil:
		return ""
	case *v.p == 0:
		return v.zero
	case *v.p < 0 && v.off:
		return "off"
	}
	return v.format(*v.p)
}

func (v *numberValue[T]) Get() any { return *v.p }

// floatValue is a float64 field.
type floatValue struct {
	p    *float64
	zero string
}

func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%.20q is not a number", s)
	}
	if f == 0 {
		// 0 is the default in Go; given on a command line it would
		// quietly become it.
		return fmt.Errorf("0 is out of range; leave it unset for the default (%s)", v.zero)
	}
	*v.p = f
	return nil
}

func (v *floatValue) String() string {
	if v.p == nil {
		return ""
	}
	if *v.p == 0 {
		return v.zero
	}
	return strconv.FormatFloat(*v.p, 'g', -1, 64)
}

func (v *floatValue) Get() any { return *v.p }

// stringValue is a string field; "" is the default.
type stringValue struct {
	p    *string
	zero string // the default, shown for ""
}

func (v *stringValue) Set(s string) error { *v.p = s; return nil }

func (v *stringValue) String() string {
	if v.p == nil || *v.p == "" {
		return v.zero
	}
	return *v.p
}

func (v *stringValue) Get() any { return *v.p }

// notValue is a bool field set to the negation of the flag (the flag
// shed-when-behind sets KeepWeightWhenBehind), so that the zero value of
// the field is the flag's default, true.
type notValue struct{ p *bool }

func (v *notValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v.p = !b
	return nil
}

func (v *notValue) String() string {
	if v.p == nil {
		return "true"
	}
	return strconv.FormatBool(!*v.p)
}

func (v *notValue) Get() any { return !*v.p }

// IsBoolFlag lets the flag stand alone (--shed-when-behind).
func (v *notValue) IsBoolFlag() bool { return true }

// labelsValue is the Labels field, given as key=value,… (nodes.ParseLabels).
type labelsValue struct{ p *map[string]string }

func (v *labelsValue) Set(s string) error {
	l, err := nodes.ParseLabels(s)
	if err != nil {
		return err
	}
	*v.p = l
	return nil
}

func (v *labelsValue) String() string {
	if v.p == nil {
		return ""
	}
	return nodes.Labels(*v.p).String()
}

func (v *labelsValue) Get() any { return *v.p }
