package schedule

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/robfig/cron/v3"
)

// ErrInvalid is returned (wrapped) for an expression, zone or jitter that
// cannot be used; the wrapping error names the rule.
var ErrInvalid = errors.New("schedule: invalid")

// MinEvery is the shortest @every duration accepted: a shorter period is
// what a session's interval is for.
const MinEvery = time.Second

// MaxJitter is the largest jitter accepted.
const MaxJitter = 24 * time.Hour

// allHours is the bit set of a field that matches every hour of the day.
const allHours = (uint64(1) << 24) - 1

// Schedule is one session's parsed schedule: immutable, safe for concurrent
// use.
type Schedule struct {
	expr  string
	loc   *time.Location
	spec  *cron.SpecSchedule // wall-clock times, evaluated in UTC (no DST)
	every time.Duration      // @every: slots at the multiples since the epoch
	fixed bool               // fixed hours: each wall time runs once (see the package doc)
	off   time.Duration      // the jitter offset, in [0, jitter)
}

// Parse parses expr in the zone tz ("" is UTC) for the session id (which
// picks the H values and the jitter offset; an empty id picks as the id ""
// does). It refuses, with an error wrapping ErrInvalid that names the rule,
// an expression cron does not accept, one that matches no time within five
// years (30 February), an unknown zone and a jitter outside [0, MaxJitter].
func Parse(id, expr, tz string, jitter time.Duration) (*Schedule, error) {
	loc, err := LoadZone(tz)
	if err != nil {
		return nil, err
	}
	if jitter < 0 || jitter > MaxJitter {
		return nil, fmt.Errorf("%w: jitter %v is outside 0..%v", ErrInvalid, jitter, MaxJitter)
	}
	s := &Schedule{expr: expr, loc: loc}
	if jitter > 0 {
		s.off = time.Duration(hash(id, "jitter") % uint64(jitter))
	}
	text := strings.TrimSpace(expr)
	switch {
	case text == "":
		return nil, fmt.Errorf("%w: schedule is empty", ErrInvalid)
	case strings.HasPrefix(text, "TZ=") || strings.HasPrefix(text, "CRON_TZ="):
		return nil, fmt.Errorf("%w: schedule %q: give the zone as tz, not in the expression", ErrInvalid, expr)
	case strings.HasPrefix(text, "@"):
		return s.parseDescriptor(text)
	}
	return s.parseFields(id, text)
}

// invalid wraps err, a reason the expression is refused, in ErrInvalid
// with the expression.
func (s *Schedule) invalid(err error) error {
	return fmt.Errorf("%w: schedule %q: %v", ErrInvalid, s.expr, err)
}

// parseDescriptor parses text, an @ descriptor: @every <duration>, or one
// cron knows (@hourly, @daily, ...).
func (s *Schedule) parseDescriptor(text string) (*Schedule, error) {
	if strings.HasPrefix(text, "@every") {
		d, err := parseEvery(text)
		if err != nil {
			return nil, s.invalid(err)
		}
		s.every = d
		return s, nil
	}
	parsed, err := cron.ParseStandard(text)
	if err != nil {
		return nil, s.invalid(err)
	}
	return s.withSpec(parsed.(*cron.SpecSchedule))
}

// parseFields parses text, a cron expression of 5 or 6 fields, with its H
// items replaced by the values id picks.
func (s *Schedule) parseFields(id, text string) (*Schedule, error) {
	fields := strings.Fields(text)
	var parser cron.Parser
	switch len(fields) {
	case 5:
		parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
	case 6:
		parser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
	default:
		return nil, fmt.Errorf("%w: schedule %q has %d fields, want 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)", ErrInvalid, s.expr, len(fields))
	}
	first := 6 - len(fields) // index of fields[0] among second..day-of-week
	for i, f := range fields {
		r, err := expandH(f, first+i, id)
		if err != nil {
			return nil, s.invalid(err)
		}
		fields[i] = r
	}
	fields[len(fields)-1] = sundaySeven(fields[len(fields)-1])
	parsed, err := parser.Parse(strings.Join(fields, " "))
	if err != nil {
		return nil, s.invalid(err)
	}
	return s.withSpec(parsed.(*cron.SpecSchedule))
}

// sundaySeven rewrites the Sundays written 7 in a day-of-week field, as
// Vixie cron and crontab(5) take them, into the 0 robfig/cron takes: an
// item "7" becomes "0", and a range "N-7" becomes "N-6,0". Other items
// with a 7 (a step over it) are left for the parser to refuse.
func sundaySeven(field string) string {
	items := strings.Split(field, ",")
	for i, it := range items {
		switch lo, ok := strings.CutSuffix(it, "-7"); {
		case it == "7":
			items[i] = "0"
		case ok && len(lo) == 1 && lo[0] >= '0' && lo[0] <= '6':
			items[i] = lo + "-6,0"
		}
	}
	return strings.Join(items, ",")
}

// Validate reports whether expr, tz and jitter would parse, for any id.
func Validate(expr, tz string, jitter time.Duration) error {
	_, err := Parse("", expr, tz, jitter)
	return err
}

// LoadZone returns the IANA zone named tz ("" and "UTC" are UTC), or an
// error wrapping ErrInvalid. "Local" is refused: a schedule must mean the same
// on every worker.
func LoadZone(tz string) (*time.Location, error) {
	switch tz {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("%w: tz %q differs between machines; name an IANA zone such as Europe/Berlin", ErrInvalid, tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("%w: tz %q is not a known IANA zone (such as Europe/Berlin)", ErrInvalid, tz)
	}
	return loc, nil
}

func (s *Schedule) withSpec(spec *cron.SpecSchedule) (*Schedule, error) {
	spec.Location = time.UTC
	s.spec = spec
	s.fixed = spec.Hour&allHours != allHours
	// Only a day of month past 28 can be missing from every month matched
	// (30 February); check those with a search.
	const days1to28 = (uint64(1)<<29 - 1) &^ 1
	if spec.Dom&days1to28 != 0 {
		return s, nil
	}
	ref := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if spec.Next(ref).IsZero() {
		return nil, fmt.Errorf("%w: schedule %q matches no time within five years", ErrInvalid, s.expr)
	}
	return s, nil
}

func parseEvery(text string) (time.Duration, error) {
	arg, ok := strings.CutPrefix(text, "@every ")
	if !ok {
		return 0, errors.New("want @every <duration>, such as @every 90s")
	}
	d, err := time.ParseDuration(strings.TrimSpace(arg))
	if err != nil {
		return 0, fmt.Errorf("@every: %v", err)
	}
	if d < MinEvery {
		return 0, fmt.Errorf("@every %v is below %v (use an interval instead)", d, MinEvery)
	}
	return d, nil
}

// String returns the expression as given.
func (s *Schedule) String() string { return s.expr }

// IsEvery reports whether the schedule is an @every descriptor, whose
// slots are the multiples of its duration since the Unix epoch in every
// zone.
func (s *Schedule) IsEvery() bool { return s.every > 0 }

// ShortestGap is the shortest time between two of the first n slots
// after 2026-01-01 in the schedule's zone (0 when it finds fewer than two):
// what a jitter must not exceed, or slots would start out of order.
func (s *Schedule) ShortestGap(n int) time.Duration {
	if s.every > 0 {
		return s.every
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, s.loc)
	slots := s.Slots(from, from.AddDate(10, 0, 0), n)
	var gap time.Duration
	for i := 1; i < len(slots); i++ {
		if d := slots[i].Sub(slots[i-1]); gap == 0 || d < gap {
			gap = d
		}
	}
	return gap
}

// Location returns the schedule's zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// Offset returns the session's jitter offset: each slot starts this long
// after its slot time.
func (s *Schedule) Offset() time.Duration { return s.off }

// Start returns when slot is due to start: slot + Offset.
func (s *Schedule) Start(slot time.Time) time.Time { return slot.Add(s.off) }

// Next returns the first slot strictly after t (in UTC), or the zero time if
// none comes within five years.
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		return nextEvery(t, s.every)
	}
	t = t.In(s.loc)
	incl := false    // whether a slot at t itself counts (t is a zone change)
	for range 1000 { // zone periods; real zones change a few times a year
		start, end := t.ZoneBounds()
		_, off := t.Zone()
		shift := time.Duration(off) * time.Second
		w := wall(t, shift)
		if incl {
			w = w.Add(-time.Nanosecond)
		}
		c := s.spec.Next(w)
		if c.IsZero() {
			return time.Time{}
		}
		slot := c.Add(-shift)
		if end.IsZero() || slot.Before(end) {
			if s.fixed && !start.IsZero() {
				// A wall time that also occurred before a fall-back at
				// start runs at its first occurrence only.
				_, prevOff := start.Add(-time.Nanosecond).Zone()
				if rep := time.Duration(prevOff-off) * time.Second; rep > 0 && slot.Before(start.Add(rep)) {
					t, incl = start.Add(rep).In(s.loc), true
					continue
				}
			}
			return slot.UTC()
		}
		// No slot left in this zone period: cross into the next one.
		_, nextOff := end.Zone()
		if gap := time.Duration(nextOff-off) * time.Second; s.fixed && gap > 0 {
			// Spring forward: wall times in [end as before, end as after)
			// do not exist; a fixed-hour slot among them runs at end.
			from := wall(end, shift)
			if c := s.spec.Next(from.Add(-time.Nanosecond)); !c.IsZero() && c.Before(from.Add(gap)) {
				return end.UTC()
			}
		}
		t, incl = end.In(s.loc), true
	}
	return time.Time{}
}

// wall returns the wall-clock reading of t at offset shift, as a UTC time.
func wall(t time.Time, shift time.Duration) time.Time {
	return t.UTC().Add(shift)
}

func nextEvery(t time.Time, d time.Duration) time.Time {
	// Slots at k*d since the epoch; work in seconds + nanoseconds to stay
	// in range for any d.
	u := t.UnixNano()
	k := u / int64(d)
	if u < 0 && u%int64(d) != 0 {
		k--
	}
	return time.Unix(0, (k+1)*int64(d)).UTC()
}

// Slots returns the slots in (after, until], in order, at most max of them.
func (s *Schedule) Slots(after, until time.Time, max int) []time.Time {
	var out []time.Time
	for t := s.Next(after); !t.IsZero() && !t.After(until) && len(out) < max; t = s.Next(t) {
		out = append(out, t)
	}
	return out
}

// PerDay returns the schedule's average number of slots per day (over
// the months and weekdays it matches), its poll load for placement.
func (s *Schedule) PerDay() float64 {
	if s.every > 0 {
		return float64(24*time.Hour) / float64(s.every)
	}
	perDay := float64(count(s.spec.Second, 60) * count(s.spec.Minute, 60) * count(s.spec.Hour, 24))
	return perDay * s.dayFraction()
}

// daysIn are the days of each month, February's averaged over four years.
var daysIn = [13]float64{0, 31, 28.25, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// dayFraction is the share of days the schedule matches, as robfig/cron
// matches them: day of month AND day of week when either is a star, else
// OR.
func (s *Schedule) dayFraction() float64 {
	const star, year = 1 << 63, 365.25
	sp := s.spec
	switch {
	case sp.Dom&star != 0: // every day of the month: the weekdays decide
		months := 0.0
		for m := 1; m <= 12; m++ {
			if sp.Month&(1<<uint(m)) != 0 {
				months += daysIn[m]
			}
		}
		return months / year * float64(count(sp.Dow, 7)) / 7
	case sp.Dow&star != 0: // every weekday: the days of the month decide
		days := 0.0
		for m := 1; m <= 12; m++ {
			if sp.Month&(1<<uint(m)) == 0 {
				continue
			}
			for d := 1; d <= 31; d++ {
				if sp.Dom&(1<<uint(d)) != 0 {
					days += min(max(daysIn[m]-float64(d-1), 0), 1)
				}
			}
		}
		return days / year
	}
	// Both restricted (OR): count the days of four years (one leap day).
	matched := 0
	day := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	const days = 4*365 + 1
	for range days {
		if s.dayMatches(day) {
			matched++
		}
		day = day.AddDate(0, 0, 1)
	}
	return float64(matched) / days
}

func (s *Schedule) dayMatches(t time.Time) bool {
	sp := s.spec
	if sp.Month&(1<<uint(t.Month())) == 0 {
		return false
	}
	dom := sp.Dom&(1<<uint(t.Day())) != 0
	dow := sp.Dow&(1<<uint(t.Weekday())) != 0
	const star = 1 << 63
	if sp.Dom&star != 0 || sp.Dow&star != 0 {
		return dom && dow
	}
	return dom || dow
}

func count(field uint64, n int) int {
	return bits.OnesCount64(field & (uint64(1)<<uint(n) - 1))
}

// fieldBounds are the ranges H picks from, per field (second, minute, hour,
// day of month, month, day of week). The day of month stops at 28 so that a
// hashed day exists in every month.
var fieldBounds = [6][2]int{{0, 59}, {0, 59}, {0, 23}, {1, 28}, {1, 12}, {0, 6}}

var fieldNames = [6]string{"second", "minute", "hour", "day-of-month", "month", "day-of-week"}

// expandH replaces the H items of one field (index 0..5 = second..day of
// week) by the values the id picks.
func expandH(field string, index int, id string) (string, error) {
	if !strings.Contains(field, "H") {
		return field, nil
	}
	items := strings.Split(field, ",")
	for i, item := range items {
		if !strings.HasPrefix(item, "H") {
			continue
		}
		v, err := expandItem(item, index, id)
		if err != nil {
			return "", fmt.Errorf("%s field %q: %v", fieldNames[index], item, err)
		}
		items[i] = v
	}
	return strings.Join(items, ","), nil
}

// expandItem returns the value or range an H item (H, H(a-b), H/n,
// H(a-b)/n) of field index picks for id.
func expandItem(item string, index int, id string) (string, error) {
	lo, hi, rest, err := hRange(item[1:], index)
	if err != nil {
		return "", err
	}
	h := hash(id, fieldNames[index])
	switch {
	case rest == "":
		return strconv.Itoa(lo + int(h%uint64(hi-lo+1))), nil
	case strings.HasPrefix(rest, "/"):
		step, err := strconv.Atoi(rest[1:])
		if err != nil || step <= 0 {
			return "", fmt.Errorf("step %q is not a positive number", rest[1:])
		}
		span := min(step, hi-lo+1)
		start := lo + int(h%uint64(span))
		return fmt.Sprintf("%d-%d/%d", start, hi, step), nil
	}
	return "", errors.New("want H, H(a-b), H/n or H(a-b)/n")
}

// hRange reads the range of an H item from rest, what follows the H: an
// explicit (a-b), or the field's bounds. It returns what follows the
// range.
func hRange(rest string, index int) (lo, hi int, after string, err error) {
	if !strings.HasPrefix(rest, "(") {
		return fieldBounds[index][0], fieldBounds[index][1], rest, nil
	}
	inner, after, ok := strings.Cut(rest[1:], ")")
	if !ok {
		return 0, 0, "", errors.New("H( without )")
	}
	a, b, ok := strings.Cut(inner, "-")
	if !ok {
		return 0, 0, "", errors.New("want H(a-b)")
	}
	if lo, err = strconv.Atoi(a); err != nil {
		return 0, 0, "", fmt.Errorf("H(a-b): %q is not a number", a)
	}
	if hi, err = strconv.Atoi(b); err != nil {
		return 0, 0, "", fmt.Errorf("H(a-b): %q is not a number", b)
	}
	if !validHRange(lo, hi, index) {
		return 0, 0, "", fmt.Errorf("H(%d-%d) is not a range within %d-%d", lo, hi, fieldBounds[index][0], fieldBounds[index][1])
	}
	return lo, hi, after, nil
}

// validHRange says whether lo-hi is a range within field index's bounds;
// in the day of month 29-31 are fine in an explicit range (H alone picks
// from 1-28).
func validHRange(lo, hi, index int) bool {
	if index == 3 {
		return lo >= 1 && hi <= 31 && lo <= hi
	}
	return lo >= fieldBounds[index][0] && hi <= fieldBounds[index][1] && lo <= hi
}

// hash is the session id's hash for one purpose (a field, the jitter).
func hash(id, purpose string) uint64 {
	d := xxhash.New()
	_, _ = d.WriteString(purpose)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(id)
	return d.Sum64()
}
