package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParsePolicy(t *testing.T) {
	for give, want := range map[string]Policy{"": Latest, "skip": Skip, "latest": Latest, "all": All} {
		p, err := ParsePolicy(give)
		require.NoError(t, err)
		require.Equal(t, want, p)
	}
	_, err := ParsePolicy("some")
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, `catchup "some" is not one of skip, latest, all`)
}

// TestDecide: a schedule every 10 minutes, decided at a fake time.
func TestDecide(t *testing.T) {
	tm := func(hm string) time.Time { return utc("2026-05-01T" + hm + "Z") }
	tests := []struct {
		name    string
		cursor  Cursor
		in      Input
		jitter  time.Duration // the offset, set directly
		want    Decision
		comment string
	}{
		{name: "on time", cursor: Cursor{Through: tm("10:20:00")}, in: Input{Now: tm("10:30:00.004")},
			want: Decision{Run: tm("10:30:00"), Through: tm("10:30:00"), Wake: tm("10:40:00")}},
		{name: "nothing due", cursor: Cursor{Through: tm("10:30:00")}, in: Input{Now: tm("10:35:00")},
			want: Decision{Through: tm("10:30:00"), Wake: tm("10:40:00")}},
		{name: "latest runs the most recent missed slot once", cursor: Cursor{Through: tm("10:00:00")}, in: Input{Now: tm("10:35:00"), Policy: Latest},
			want: Decision{Run: tm("10:30:00"), Skipped: 2, Through: tm("10:30:00"), Wake: tm("10:40:00")}},
		{name: "all runs the oldest missed slot first, and wakes at once for the next", cursor: Cursor{Through: tm("10:00:00")}, in: Input{Now: tm("10:35:00"), Policy: All},
			want: Decision{Run: tm("10:10:00"), Through: tm("10:10:00"), Wake: tm("10:20:00")}},
		{name: "skip runs no missed slot", cursor: Cursor{Through: tm("10:00:00")}, in: Input{Now: tm("10:35:00"), Policy: Skip},
			want: Decision{Skipped: 3, Through: tm("10:30:00"), Wake: tm("10:40:00")}},
		{name: "skip still runs a slot within OnTime", cursor: Cursor{Through: tm("10:00:00")}, in: Input{Now: tm("10:30:00.5"), Policy: Skip},
			want: Decision{Run: tm("10:30:00"), Skipped: 2, Through: tm("10:30:00"), Wake: tm("10:40:00")}},
		{name: "skip past OnTime", cursor: Cursor{Through: tm("10:20:00")}, in: Input{Now: tm("10:30:02"), Policy: Skip, OnTime: time.Second},
			want: Decision{Skipped: 1, Through: tm("10:30:00"), Wake: tm("10:40:00")}},
		{name: "all stays within the window", cursor: Cursor{Through: tm("08:00:00")}, in: Input{Now: tm("10:35:00"), Policy: All},
			want: Decision{Run: tm("09:40:00"), Skipped: 9, Through: tm("09:40:00"), Wake: tm("09:50:00")}},
		{name: "latest with a short window", cursor: Cursor{Through: tm("10:00:00")}, in: Input{Now: tm("10:35:00"), Window: 2 * time.Minute},
			want: Decision{Skipped: 3, Through: tm("10:33:00").Add(-time.Nanosecond), Wake: tm("10:40:00")}},
		{name: "nothing known (a data loss): latest runs the latest slot in the window", in: Input{Now: tm("10:35:00")},
			want: Decision{Run: tm("10:30:00"), Through: tm("10:30:00"), Wake: tm("10:40:00")}},
		{name: "a new session does not run past slots", in: Input{Now: tm("10:35:00"), Since: tm("10:34:00")},
			want: Decision{Wake: tm("10:40:00")}},
		{name: "a new session under skip", in: Input{Now: tm("10:35:00"), Since: tm("10:34:00"), Policy: Skip},
			want: Decision{Wake: tm("10:40:00")}},
		{name: "a new session under all runs no past slot either", in: Input{Now: tm("10:35:00"), Since: tm("10:34:00"), Policy: All},
			want: Decision{Wake: tm("10:40:00")}},
		{name: "a new session under all runs the slots due since", in: Input{Now: tm("10:45:00"), Since: tm("10:34:00"), Policy: All},
			want: Decision{Run: tm("10:40:00"), Through: tm("10:40:00"), Wake: tm("10:50:00")}},
		{name: "a resumed session does not run or count the paused slots", cursor: Cursor{Through: tm("09:00:00")}, in: Input{Now: tm("10:35:00"), Since: tm("10:34:00")},
			want: Decision{Through: tm("10:34:00").Add(-time.Nanosecond), Wake: tm("10:40:00")}},
		{name: "overlap: a slot due while a poll runs is skipped", cursor: Cursor{Through: tm("10:20:00"), Running: true}, in: Input{Now: tm("10:30:00.1")},
			want: Decision{Skipped: 1, Through: tm("10:30:00"), Wake: tm("10:40:00")}},
		{name: "overlap under all skips every due slot", cursor: Cursor{Through: tm("10:00:00"), Running: true}, in: Input{Now: tm("10:35:00"), Policy: All},
			want: Decision{Skipped: 3, Through: tm("10:30:00"), Wake: tm("10:40:00")}},
		{name: "jitter: a slot is not due before its start", cursor: Cursor{Through: tm("10:20:00")}, in: Input{Now: tm("10:32:59")}, jitter: 3 * time.Minute,
			want: Decision{Through: tm("10:20:00"), Wake: tm("10:33:00")}},
		{name: "jitter: due at its start", cursor: Cursor{Through: tm("10:20:00")}, in: Input{Now: tm("10:33:00")}, jitter: 3 * time.Minute,
			want: Decision{Run: tm("10:30:00"), Through: tm("10:30:00"), Wake: tm("10:43:00")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, "id", "*/10 * * * *", "", 0)
			s.off = tt.jitter
			require.Equal(t, tt.want, s.Decide(tt.cursor, tt.in))
		})
	}
}

// TestDecideAllRunsEveryMissedSlotInOrder drives Decide as a holder does:
// run what it says, then decide again at the same time.
func TestDecideAllRunsEveryMissedSlotInOrder(t *testing.T) {
	s := mustParse(t, "id", "*/10 * * * *", "", 0)
	now := utc("2026-05-01T10:35:00Z")
	c := Cursor{Through: utc("2026-05-01T10:00:00Z")}
	var ran []string
	for range 10 {
		d := s.Decide(c, Input{Now: now, Policy: All})
		if d.Run.IsZero() {
			require.Equal(t, utc("2026-05-01T10:40:00Z"), d.Wake)
			break
		}
		require.False(t, d.Wake.After(now) && len(ran) < 2, "wakes at once while slots are due")
		ran = append(ran, d.Run.Format("15:04"))
		c.Through = d.Through
	}
	require.Equal(t, []string{"10:10", "10:20", "10:30"}, ran)
}

// TestDecideCountsALongOutage: skipped slots past maxCounted are
// estimated from the rate.
func TestDecideCountsALongOutage(t *testing.T) {
	s := mustParse(t, "id", "* * * * * *", "", 0)
	now := utc("2026-05-01T10:00:00Z")
	d := s.Decide(Cursor{Through: now.Add(-48 * time.Hour)}, Input{Now: now, Policy: Latest})
	require.Equal(t, now, d.Run)
	want := 48*3600 - 1
	require.InDelta(t, want, d.Skipped, float64(want)/100)
	require.Equal(t, now.Add(time.Second), d.Wake)
}

// TestDecideNeverRunsBeforeItsStart: whatever the cursor and time, a slot
// run is due (slot + offset <= now) and after the cursor.
func TestDecideNeverRunsBeforeItsStart(t *testing.T) {
	s := mustParse(t, "x", "*/2 * * * * *", "Europe/Berlin", 1500*time.Millisecond)
	base := utc("2026-10-25T00:59:50Z")
	for _, p := range []Policy{Skip, Latest, All} {
		c, runs := Cursor{}, 0
		for ms := 0; ms < 30_000; ms += 137 {
			now := base.Add(time.Duration(ms) * time.Millisecond)
			d := s.Decide(c, Input{Now: now, Policy: p, Window: 10 * time.Second})
			if !d.Run.IsZero() {
				runs++
				require.False(t, s.Start(d.Run).After(now), "%s: slot %v run at %v", p, d.Run, now)
				require.True(t, c.Through.IsZero() || d.Run.After(c.Through))
			}
			require.False(t, d.Through.Before(c.Through), "the cursor never goes back")
			c.Through = d.Through
		}
		require.Greater(t, runs, 5, p)
	}
}

func TestPrev(t *testing.T) {
	tests := []struct{ expr, tz, at, want string }{
		{"*/10 * * * *", "", "2026-05-01T10:35:00Z", "2026-05-01T10:30:00Z"},
		{"*/10 * * * *", "", "2026-05-01T10:30:00Z", "2026-05-01T10:30:00Z"},
		{"0 9 * * 1-5", "Europe/Berlin", "2026-05-04T06:00:00Z", "2026-05-01T07:00:00Z"}, // Monday early: Friday's
		{"@monthly", "", "2026-05-01T00:00:00.5Z", "2026-05-01T00:00:00Z"},
		{"*/2 * * * * *", "", "2026-05-01T10:00:01.999Z", "2026-05-01T10:00:00Z"},
	}
	for _, tt := range tests {
		s := mustParse(t, "id", tt.expr, tt.tz, 0)
		require.Equal(t, utc(tt.want), s.Prev(utc(tt.at)), tt.expr)
	}
}
