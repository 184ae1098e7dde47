package session

import (
	"fmt"
	"math"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pollworker/pollworker/schedule"
)

// MaxCatchUpWindow is the longest CatchUpWindow accepted.
const MaxCatchUpWindow = 7 * 24 * time.Hour

// Scheduled reports whether the session polls at the slots of a Schedule
// rather than on an Interval.
func (s Session) Scheduled() bool { return s.Schedule != "" }

// ParseSchedule parses the session's Schedule with its TZ and Jitter (the
// H fields and the jitter offset are picked by its ID). For a session
// without a Schedule it returns nil and no error.
func (s Session) ParseSchedule() (*schedule.Schedule, error) {
	if !s.Scheduled() {
		return nil, nil
	}
	return schedule.Parse(s.ID, s.Schedule, s.TZ, s.Jitter.D())
}

// CatchUpPolicy returns the session's catch-up policy (schedule.Latest when
// it names none, or names one this version does not know).
func (s Session) CatchUpPolicy() schedule.Policy {
	p, err := schedule.ParsePolicy(s.CatchUp)
	if err != nil {
		return schedule.DefaultPolicy
	}
	return p
}

// CatchUpWindowOrDefault returns CatchUpWindow, or schedule.DefaultWindow
// when it is zero.
func (s Session) CatchUpWindowOrDefault() time.Duration {
	if w := s.CatchUpWindow.D(); w > 0 {
		return w
	}
	return schedule.DefaultWindow
}

// scheduleLoad is the polls per day of a scheduled session: its slots per
// day, rounded up, at least 1.
func scheduleLoad(s Session) int {
	sch, err := s.ParseSchedule()
	if err != nil {
		return 1
	}
	return max(int(math.Ceil(sch.PerDay())), 1)
}

// validateTiming checks that the session has exactly one of Interval and
// Schedule, and the fields that go with a schedule.
func (s Session) validateTiming() error {
	const rule = "a session has exactly one of interval and schedule"
	if !s.Scheduled() {
		if err := validateInterval(s.Interval.D(), rule); err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			set  bool
		}{{"tz", s.TZ != ""}, {"jitter", s.Jitter != 0}, {"catchup", s.CatchUp != ""}, {"catchup_window", s.CatchUpWindow != 0}} {
			if f.set {
				return &FieldError{Field: f.name, Reason: "is set without schedule (it applies to scheduled sessions only)"}
			}
		}
		return nil
	}
	if s.Interval != 0 {
		return &FieldError{Field: "schedule", Reason: "and interval are both set: " + rule}
	}
	if _, err := s.ParseSchedule(); err != nil {
		field, reason := scheduleReason(err)
		return &FieldError{Field: field, Reason: reason}
	}
	if _, err := schedule.ParsePolicy(s.CatchUp); err != nil {
		return &FieldError{Field: "catchup", Reason: fmt.Sprintf("%.40q is not one of skip, latest, all", s.CatchUp)}
	}
	switch w := s.CatchUpWindow.D(); {
	case w < 0:
		return &FieldError{Field: "catchup_window", Reason: fmt.Sprintf("%v is negative", w)}
	case w > MaxCatchUpWindow:
		return &FieldError{Field: "catchup_window", Reason: fmt.Sprintf("%v is above the maximum %v", w, MaxCatchUpWindow)}
	}
	return nil
}

func validateInterval(d time.Duration, rule string) error {
	switch {
	case d == 0:
		return &FieldError{Field: "interval", Reason: "missing or zero (" + rule + ")"}
	case d < 0:
		return &FieldError{Field: "interval", Reason: fmt.Sprintf("%v is negative", d)}
	case d < MinInterval:
		return &FieldError{Field: "interval", Reason: fmt.Sprintf("%v is below the minimum %v", d, MinInterval)}
	case d > MaxInterval:
		return &FieldError{Field: "interval", Reason: fmt.Sprintf("%v is above the maximum %v", d, MaxInterval)}
	}
	return nil
}

// scheduleReason splits an error of schedule.Parse into the field it is
// about (schedule, tz or jitter) and the rule, without the package prefix.
func scheduleReason(err error) (field, reason string) {
	msg := strings.TrimPrefix(err.Error(), schedule.ErrInvalid.Error()+": ")
	for _, f := range []string{"tz ", "jitter "} {
		if strings.HasPrefix(msg, f) {
			return strings.TrimSpace(f), strings.TrimPrefix(msg, f)
		}
	}
	if rest, ok := strings.CutPrefix(msg, "schedule "); ok {
		return "schedule", rest
	}
	return "schedule", msg
}

// fileSchedule is the schedule's part of an entry as EncodeFile writes it.
type fileSchedule struct {
	Schedule      string `json:"schedule,omitempty" yaml:"schedule,omitempty"`
	TZ            string `json:"tz,omitempty" yaml:"tz,omitempty"`
	Jitter        string `json:"jitter,omitempty" yaml:"jitter,omitempty"`
	CatchUp       string `json:"catchup,omitempty" yaml:"catchup,omitempty"`
	CatchUpWindow string `json:"catchup_window,omitempty" yaml:"catchup_window,omitempty"`
}

func fileScheduleOf(s Session) fileSchedule {
	f := fileSchedule{Schedule: s.Schedule, TZ: s.TZ, CatchUp: s.CatchUp}
	if s.Jitter != 0 {
		f.Jitter = s.Jitter.D().String()
	}
	if s.CatchUpWindow != 0 {
		f.CatchUpWindow = s.CatchUpWindow.D().String()
	}
	return f
}

// readScheduleField reads one of the schedule's fields of a sessions file
// entry (schedule, tz, jitter, catchup, catchup_window), or says why not.
// The fields are checked together, with the whole entry, by checkTiming.
func readScheduleField(e *Entry, name string, v *yaml.Node) string {
	text, ok := scalar(v)
	if !ok {
		return name + " must be a string"
	}
	switch name {
	case "schedule":
		e.Session.Schedule = text
	case "tz":
		e.Session.TZ = text
	case "catchup":
		e.Session.CatchUp = text
	case "jitter", "catchup_window":
		d, err := time.ParseDuration(text)
		if err != nil {
			return fmt.Sprintf(`%s %.40q is not a duration like "30s" or "1h"`, name, text)
		}
		if name == "jitter" {
			e.Session.Jitter = Duration(d)
		} else {
			e.Session.CatchUpWindow = Duration(d)
		}
	}
	return ""
}

// checkTiming checks the entry's interval and schedule fields together
// (the rules of validateTiming), when the fields involved were read.
func checkTiming(s Session, seen, failed map[string]bool) []string {
	if !seen["schedule"] {
		if failed["schedule"] {
			return nil
		}
		// An interval session: the interval itself is checked by the
		// caller; fields that need a schedule are refused here.
		s.Interval = Duration(time.Second)
		if err := s.validateTiming(); err != nil {
			return []string{fieldReason(err)}
		}
		return nil
	}
	switch {
	case strings.TrimSpace(s.Schedule) == "":
		return []string{"schedule is empty: leave it out for an interval session"}
	case seen["interval"] && s.Interval == 0 && !failed["interval"]:
		return []string{"interval is 0: leave it out for a scheduled session"}
	case seen["interval"] || failed["interval"]:
		return []string{"schedule and interval are both set: a session has exactly one of interval and schedule"}
	}
	if err := s.validateTiming(); err != nil {
		return []string{fieldReason(err)}
	}
	if err := s.slotWriteRules(); err != nil {
		return []string{fieldReason(err)}
	}
	return nil
}

// missingField says that a required field of an entry is missing.
func missingField(field string) string {
	if field == "interval" {
		return `missing field "interval" (or "schedule": a session has exactly one of interval and schedule)`
	}
	return fmt.Sprintf("missing field %q", field)
}

// ValidateForWrite is Validate and the rules only writes apply
// (slotWriteRules, and the encoded size: Encode): what Store.Put checks
// before writing, beside the URL rule.
func (s Session) ValidateForWrite() error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := s.slotWriteRules(); err != nil {
		return err
	}
	// The size the store refuses (Encode), found before anything is
	// written: a file's entry that big passed --dry-run and failed
	// the write after the entries before it were written.
	_, err := Encode(s)
	return err
}

// gapSlots is how many slots slotWriteRules looks at for the shortest gap.
const gapSlots = 200

// slotWriteRules are the rules of a scheduled session that writes apply
// (Store.Put, PutMany, ParseFile) and reads do not (they would cost every
// read a walk over slots, and a session stored before them still polls):
// a jitter no longer than the shortest time between two slots (else slots
// start out of order, and before the session existed), and no tz on an
// @every schedule (its slots are the same in every zone).
func (s Session) slotWriteRules() error {
	if s.Schedule == "" {
		return nil
	}
	sch, err := s.ParseSchedule()
	if err != nil {
		return nil // Validate says why
	}
	if sch.IsEvery() && s.TZ != "" && s.TZ != "UTC" {
		return &FieldError{Field: "tz", Reason: "has no effect on an @every schedule (its slots are the multiples of its duration since the Unix epoch, in every zone): leave it out"}
	}
	if j := s.Jitter.D(); j > 0 {
		if gap := sch.ShortestGap(gapSlots); gap > 0 && j > gap {
			return &FieldError{Field: "jitter", Reason: fmt.Sprintf("%v is longer than the %v between two slots of the schedule: slots would start out of order", j, gap)}
		}
	}
	return nil
}
