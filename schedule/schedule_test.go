package schedule

import (
	"fmt"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func mustParse(t *testing.T, id, expr, tz string, jitter time.Duration) *Schedule {
	t.Helper()
	s, err := Parse(id, expr, tz, jitter)
	require.NoError(t, err)
	return s
}

// next returns the n slots after t.
func next(s *Schedule, after time.Time, n int) []string {
	var out []string
	for range n {
		after = s.Next(after)
		out = append(out, after.Format(time.RFC3339))
	}
	return out
}

// The dates: Berlin springs forward on 2026-03-29 at 01:00 UTC (02:00 CET
// -> 03:00 CEST) and falls back on 2026-10-25 at 01:00 UTC (03:00 CEST ->
// 02:00 CET); New York springs forward on 2026-03-08 at 07:00 UTC (02:00
// EST -> 03:00 EDT) and falls back on 2026-11-01 at 06:00 UTC (02:00 EDT ->
// 01:00 EST).
func TestNextAcrossDST(t *testing.T) {
	tests := []struct {
		name, tz, expr, after string
		want                  []string
	}{
		{"berlin skipped hour, fixed time runs after the change", "Europe/Berlin", "30 2 * * *", "2026-03-28T02:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"berlin skipped hour, two fixed times run once", "Europe/Berlin", "0,30 2 * * *", "2026-03-28T02:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T00:30:00Z"}},
		{"berlin skipped hour, a time at the change runs once", "Europe/Berlin", "0 3 * * *", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T01:00:00Z"}},
		{"berlin skipped hour, every hour follows the instants", "Europe/Berlin", "*/30 * * * *", "2026-03-29T00:00:00Z",
			[]string{"2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z"}},
		{"berlin repeated hour, fixed time at first occurrence only", "Europe/Berlin", "30 2 * * *", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"berlin repeated hour, fixed times at first occurrence only", "Europe/Berlin", "0,30 2 * * *", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:00:00Z"}},
		{"berlin repeated hour, every hour runs both", "Europe/Berlin", "*/30 * * * *", "2026-10-25T00:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:00:00Z"}},
		{"berlin repeated hour, from the first into the second occurrence", "Europe/Berlin", "5 * * * *", "2026-10-25T00:10:00Z",
			[]string{"2026-10-25T01:05:00Z", "2026-10-25T02:05:00Z"}},
		{"berlin repeated hour, from inside the second occurrence", "Europe/Berlin", "15 * * * *", "2026-10-25T01:05:00Z",
			[]string{"2026-10-25T01:15:00Z", "2026-10-25T02:15:00Z"}},
		{"berlin repeated hour, 6 fields", "Europe/Berlin", "0 0 2 * * *", "2026-10-24T23:59:59Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-26T01:00:00Z"}},
		{"berlin daily descriptor", "Europe/Berlin", "@daily", "2026-03-28T00:00:00Z",
			[]string{"2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"}},
		{"new york skipped hour, fixed time runs after the change", "America/New_York", "30 2 * * *", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"new york skipped hour, every hour follows the instants", "America/New_York", "0 * * * *", "2026-03-08T06:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		{"new york repeated hour, fixed time at first occurrence only", "America/New_York", "30 1 * * *", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"new york repeated hour, every hour runs both", "America/New_York", "*/30 * * * *", "2026-11-01T05:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:00:00Z"}},
		{"new york weekdays at nine", "America/New_York", "0 9 * * 1-5", "2026-03-06T15:00:00Z",
			[]string{"2026-03-09T13:00:00Z", "2026-03-10T13:00:00Z"}},
		{"utc seconds field", "", "*/2 * * * * *", "2026-01-01T00:00:00.5Z",
			[]string{"2026-01-01T00:00:02Z", "2026-01-01T00:00:04Z"}},
		{"every is anchored at the epoch", "Europe/Berlin", "@every 90s", "2026-01-01T00:00:10Z",
			[]string{"2026-01-01T00:01:30Z", "2026-01-01T00:03:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, "id", tt.expr, tt.tz, 0)
			require.Equal(t, tt.want, next(s, utc(tt.after), len(tt.want)))
		})
	}
}

// TestNextFollowsInstantsEveryHour checks a schedule that runs every hour
// against a brute force over every minute of the change days: a slot is
// each instant whose wall time the fields match.
func TestNextFollowsInstantsEveryHour(t *testing.T) {
	for _, tc := range []struct{ tz, day string }{
		{"Europe/Berlin", "2026-03-28T12:00:00Z"}, {"Europe/Berlin", "2026-10-24T12:00:00Z"},
		{"America/New_York", "2026-03-07T12:00:00Z"}, {"America/New_York", "2026-10-31T12:00:00Z"},
		{"Australia/Lord_Howe", "2026-04-04T00:00:00Z"}, // a 30-minute change
	} {
		loc, err := time.LoadLocation(tc.tz)
		require.NoError(t, err)
		s := mustParse(t, "id", "*/15 * * * *", tc.tz, 0)
		from := utc(tc.day)
		until := from.Add(48 * time.Hour)
		var want []time.Time
		for i := from.Add(time.Minute); !i.After(until); i = i.Add(time.Minute) {
			if i.In(loc).Minute()%15 == 0 {
				want = append(want, i)
			}
		}
		require.Equal(t, want, s.Slots(from, until, 1000), tc.tz+" "+tc.day)
	}
}

// TestNextInUTCIsCrons checks that without a zone change the slots are
// robfig/cron's own.
func TestNextInUTCIsCrons(t *testing.T) {
	for _, expr := range []string{"*/7 * * * *", "0 9 * * 1-5", "15 10 1,15 * *", "0 0 29 2 *", "*/13 */5 * * * *", "@weekly", "@monthly"} {
		s := mustParse(t, "id", expr, "", 0)
		c, err := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor).Parse(expr)
		require.NoError(t, err)
		at := utc("2026-01-01T00:00:00Z")
		for range 50 {
			want := c.Next(at.In(time.UTC))
			require.Equal(t, want, s.Next(at), expr)
			at = want
		}
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		name, expr, tz string
		jitter         time.Duration
		want           string
	}{
		{"empty", "", "", 0, "schedule is empty"},
		{"four fields", "* * * *", "", 0, "has 4 fields, want 5"},
		{"seven fields", "* * * * * * *", "", 0, "has 7 fields"},
		{"minute out of range", "61 * * * *", "", 0, "above maximum"},
		{"never fires", "0 0 30 2 *", "", 0, "matches no time within five years"},
		{"zone in expression", "CRON_TZ=UTC * * * * *", "", 0, "give the zone as tz"},
		{"every below a second", "@every 100ms", "", 0, "below 1s"},
		{"every not a duration", "@every soon", "", 0, "@every"},
		{"unknown descriptor", "@fortnightly", "", 0, "unrecognized descriptor"},
		{"unknown zone", "* * * * *", "Mars/Olympus", 0, "not a known IANA zone"},
		{"local zone", "* * * * *", "Local", 0, "differs between machines"},
		{"negative jitter", "* * * * *", "", -time.Second, "jitter -1s is outside"},
		{"jitter too long", "* * * * *", "", 25 * time.Hour, "jitter 25h0m0s is outside"},
		{"H range backwards", "H(5-3) * * * *", "", 0, "is not a range"},
		{"H range out of bounds", "H(0-70) * * * *", "", 0, "is not a range"},
		{"H step zero", "H/0 * * * *", "", 0, "not a positive number"},
		{"H junk", "Hx * * * *", "", 0, "want H, H(a-b)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("id", tt.expr, tt.tz, tt.jitter)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestHPicksPerSession(t *testing.T) {
	tests := []struct {
		expr  string
		check func(t *testing.T, slots []time.Time)
	}{
		{"H(10-19) * * * *", func(t *testing.T, slots []time.Time) {
			m := slots[0].Minute()
			require.True(t, m >= 10 && m <= 19, "minute %d", m)
			for _, s := range slots {
				require.Equal(t, m, s.Minute())
			}
		}},
		{"H/15 * * * *", func(t *testing.T, slots []time.Time) {
			m := slots[0].Minute() % 15
			for i, s := range slots {
				require.Equal(t, m, s.Minute()%15)
				if i > 0 {
					require.Equal(t, 15*time.Minute, s.Sub(slots[i-1]))
				}
			}
		}},
		{"0 H(8-10)/2 * * *", func(t *testing.T, slots []time.Time) {
			for _, s := range slots {
				require.Contains(t, []int{8, 9, 10}, s.Hour())
			}
		}},
		{"H H * * *", func(t *testing.T, slots []time.Time) {
			require.Equal(t, 24*time.Hour, slots[1].Sub(slots[0]))
		}},
	}
	from := utc("2026-05-01T00:00:00Z")
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			seen := map[string]bool{}
			for i := range 50 {
				id := fmt.Sprintf("session-%d", i)
				s := mustParse(t, id, tt.expr, "", 0)
				again := mustParse(t, id, tt.expr, "", 0)
				slots := s.Slots(from, from.Add(72*time.Hour), 6)
				require.Equal(t, slots, again.Slots(from, from.Add(72*time.Hour), 6), "deterministic")
				tt.check(t, slots)
				seen[slots[0].Format(time.TimeOnly)] = true
			}
			require.Greater(t, len(seen), 1, "ids pick different values")
		})
	}
}

// TestHSpreads: 100k sessions on "H * * * *" spread over the hour, and 20k
// on "H * * * * *" over the minute; the busiest bucket is reported and
// bounded (a plain "0 * * * *" puts them all in one: busiest/mean 60).
func TestHSpreads(t *testing.T) {
	for _, tc := range []struct {
		expr    string
		ids     int
		buckets int
		bucket  func(time.Time) int
		bound   float64
	}{
		{"H * * * *", 100_000, 60, func(s time.Time) int { return s.Minute() }, 1.15},
		{"H * * * * *", 20_000, 60, func(s time.Time) int { return s.Second() }, 1.3},
	} {
		ids := tc.ids
		counts := make([]int, tc.buckets)
		from := utc("2026-05-01T00:00:00Z")
		for i := range ids {
			s := mustParse(t, fmt.Sprintf("sess-%d", i), tc.expr, "", 0)
			counts[tc.bucket(s.Next(from))]++
		}
		busiest := 0
		for _, c := range counts {
			busiest = max(busiest, c)
		}
		mean := float64(ids) / float64(tc.buckets)
		ratio := float64(busiest) / mean
		t.Logf("%q over %d ids: busiest bucket %d, mean %.1f, busiest/mean %.3f", tc.expr, ids, busiest, mean, ratio)
		require.Less(t, ratio, tc.bound, tc.expr)
	}
}

func TestJitterBounds(t *testing.T) {
	const jitter = 30 * time.Second
	lo, hi := jitter, time.Duration(0)
	slot := utc("2026-05-01T10:00:00Z")
	for i := range 2_000 {
		id := fmt.Sprintf("sess-%d", i)
		s := mustParse(t, id, "*/5 * * * *", "", jitter)
		off := s.Offset()
		require.GreaterOrEqual(t, off, time.Duration(0))
		require.Less(t, off, jitter)
		require.Equal(t, off, mustParse(t, id, "*/5 * * * *", "", jitter).Offset(), "deterministic")
		require.Equal(t, slot.Add(off), s.Start(slot))
		lo, hi = min(lo, off), max(hi, off)
	}
	t.Logf("offsets of 2k ids within jitter %v: %v..%v", jitter, lo, hi)
	require.Less(t, lo, time.Second)
	require.Greater(t, hi, jitter-time.Second)
	require.Zero(t, mustParse(t, "x", "*/5 * * * *", "", 0).Offset())
}

func TestPerDay(t *testing.T) {
	tests := []struct {
		expr string
		want float64
	}{
		{"*/2 * * * * *", 43200},
		{"H * * * *", 24},
		{"0 9 * * 1-5", 5.0 / 7},
		{"@every 90s", 960},
		{"@daily", 1},
		{"@monthly", 12 / 365.25},
		{"0 0 1,15 * *", 24 / 365.25},
		{"0 0 31 * *", 7 / 365.25},
		{"0 0 29 2 *", 0.25 / 365.25},
		{"0 0 1 * 1", (12 + 52.18 - 12.0/7) / 365.25}, // the 1st OR a Monday
		{"0 12 * 6-8 mon-fri", 92.0 / 365.25 * 5 / 7},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			require.InEpsilon(t, tt.want, mustParse(t, "id", tt.expr, "", 0).PerDay(), 0.01)
		})
	}
}

// TestSundaySeven: a day of week 7 is Sunday, as in Vixie cron and
// crontab(5) (robfig/cron alone refuses it).
func TestSundaySeven(t *testing.T) {
	from := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC) // a Friday
	for _, tt := range []struct{ give, same string }{
		{"0 0 * * 7", "0 0 * * 0"},
		{"0 0 * * 5-7", "0 0 * * 5,6,0"},
		{"0 0 * * 1,7", "0 0 * * 1,0"},
		{"0 0 0 * * 7", "0 0 0 * * 0"},
	} {
		t.Run(tt.give, func(t *testing.T) {
			got, err := Parse("s", tt.give, "", 0)
			require.NoError(t, err)
			want, err := Parse("s", tt.same, "", 0)
			require.NoError(t, err)
			require.Equal(t, want.Slots(from, from.AddDate(0, 0, 30), 20), got.Slots(from, from.AddDate(0, 0, 30), 20))
		})
	}
	_, err := Parse("s", "0 0 * * */7", "", 0)
	require.NoError(t, err, "a step of 7 is no Sunday")
	_, err = Parse("s", "0 0 * * 8", "", 0)
	require.ErrorIs(t, err, ErrInvalid)
}
