package session

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/schedule"
)

func TestValidateSchedule(t *testing.T) {
	base := Session{ID: "s", URL: "http://example.com/"}
	with := func(f func(*Session)) Session { s := base; f(&s); return s }
	tests := []struct {
		name string
		give Session
		want string // "" for valid
	}{
		{"cron", with(func(s *Session) { s.Schedule = "*/5 * * * *" }), ""},
		{"seconds, zone, jitter, policy", with(func(s *Session) {
			s.Schedule, s.TZ, s.Jitter, s.CatchUp, s.CatchUpWindow = "H 0 9 * * 1-5", "Europe/Berlin", Duration(time.Minute), "all", Duration(3*time.Hour)
		}), ""},
		{"descriptor", with(func(s *Session) { s.Schedule = "@every 90s" }), ""},
		{"neither", base, "interval missing or zero (a session has exactly one of interval and schedule)"},
		{"both", with(func(s *Session) { s.Schedule, s.Interval = "@hourly", Duration(time.Second) }),
			"schedule and interval are both set: a session has exactly one of interval and schedule"},
		{"invalid expression", with(func(s *Session) { s.Schedule = "61 * * * *" }), `schedule "61 * * * *": end of range (61) above maximum (59): 61`},
		{"too few fields", with(func(s *Session) { s.Schedule = "* * *" }), `schedule "* * *" has 3 fields, want 5`},
		{"unknown zone", with(func(s *Session) { s.Schedule, s.TZ = "@daily", "Europe/Atlantis" }), `tz "Europe/Atlantis" is not a known IANA zone`},
		{"jitter too long", with(func(s *Session) { s.Schedule, s.Jitter = "@daily", Duration(48*time.Hour) }), "jitter 48h0m0s is outside 0..24h0m0s"},
		{"unknown policy", with(func(s *Session) { s.Schedule, s.CatchUp = "@daily", "some" }), `catchup "some" is not one of skip, latest, all`},
		{"negative window", with(func(s *Session) { s.Schedule, s.CatchUpWindow = "@daily", Duration(-time.Second) }), "catchup_window -1s is negative"},
		{"window too long", with(func(s *Session) { s.Schedule, s.CatchUpWindow = "@daily", Duration(200*time.Hour) }), "catchup_window 200h0m0s is above the maximum 168h0m0s"},
		{"tz without schedule", with(func(s *Session) { s.Interval, s.TZ = Duration(time.Second), "UTC" }), "tz is set without schedule"},
		{"catchup without schedule", with(func(s *Session) { s.Interval, s.CatchUp = Duration(time.Second), "all" }), "catchup is set without schedule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestScheduledLoad(t *testing.T) {
	tests := []struct {
		give Session
		want int
	}{
		{Session{Schedule: "*/2 * * * * *"}, 43200},
		{Session{Schedule: "H * * * *"}, 24},
		{Session{Schedule: "0 9 * * 1-5", TZ: "Europe/Berlin"}, 1}, // 5/7 rounds up
		{Session{Schedule: "@every 1m"}, 1440},
		{Session{Schedule: "@hourly", Paused: true}, 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.give.Load(), tt.give.Schedule)
	}
}

func TestScheduleAccessors(t *testing.T) {
	s := Session{ID: "a", Schedule: "H * * * *", Jitter: Duration(time.Minute)}
	sch, err := s.ParseSchedule()
	require.NoError(t, err)
	same, err := schedule.Parse("a", "H * * * *", "", time.Minute)
	require.NoError(t, err)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, same.Next(from), sch.Next(from))
	require.Equal(t, same.Offset(), sch.Offset())
	require.Equal(t, schedule.Latest, s.CatchUpPolicy())
	require.Equal(t, time.Hour, s.CatchUpWindowOrDefault())
	s.CatchUp, s.CatchUpWindow = "skip", Duration(time.Minute)
	require.Equal(t, schedule.Skip, s.CatchUpPolicy())
	require.Equal(t, time.Minute, s.CatchUpWindowOrDefault())
	none, err := Session{ID: "b", Interval: Duration(time.Second)}.ParseSchedule()
	require.NoError(t, err)
	require.Nil(t, none)
}

// TestScheduleStoredForm: a scheduled session encodes without interval
// and decodes back the same.
func TestScheduleStoredForm(t *testing.T) {
	s := Session{ID: "r", URL: "http://example.com/", Schedule: "0 9 * * *", TZ: "Europe/Berlin",
		Jitter: Duration(30 * time.Second), CatchUp: "all", CatchUpWindow: Duration(2 * time.Hour)}
	raw, err := Encode(s)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	require.NotContains(t, m, "interval")
	require.Equal(t, "0 9 * * *", m["schedule"])
	got, err := Decode("r", raw)
	require.NoError(t, err)
	require.Equal(t, s, got)
}

func TestScheduleFile(t *testing.T) {
	sessions := []Session{
		{ID: "report", URL: "http://example.com/r", Schedule: "0 9 * * 1-5", TZ: "Europe/Berlin", Jitter: Duration(time.Minute),
			CatchUp: "all", CatchUpWindow: Duration(6 * time.Hour)},
		{ID: "tick", URL: "http://example.com/t", Schedule: "*/2 * * * * *"},
		{ID: "plain", URL: "http://example.com/p", Interval: Duration(5 * time.Second)},
	}
	for _, format := range []FileFormat{FormatYAML, FormatJSON} {
		var buf bytes.Buffer
		require.NoError(t, EncodeFile(&buf, sessions, format))
		require.NotContains(t, buf.String(), "interval: 0s")
		got, err := ParseFile(buf.Bytes(), HTTPURL)
		require.NoError(t, err, buf.String())
		require.Len(t, got, len(sessions))
		for i, e := range got {
			require.Equal(t, sessions[i], e.Session, string(format))
		}
	}

	tests := []struct{ name, give, want string }{
		{"both", "sessions:\n  - {id: a, url: 'http://x/', interval: 1s, schedule: '@hourly'}\n",
			"entry 1 (line 2, id a): schedule and interval are both set: a session has exactly one of interval and schedule"},
		{"empty schedule beside an interval", "sessions:\n  - {id: a, url: 'http://x/', interval: 1s, schedule: ''}\n",
			"entry 1 (line 2, id a): schedule is empty: leave it out for an interval session"},
		{"zero interval beside a schedule", "sessions:\n  - {id: a, url: 'http://x/', interval: 0s, schedule: '@hourly'}\n",
			"entry 1 (line 2, id a): interval is 0: leave it out for a scheduled session"},
		{"neither", "sessions:\n  - {id: a, url: 'http://x/'}\n",
			`entry 1 (line 2, id a): missing field "interval" (or "schedule": a session has exactly one of interval and schedule)`},
		{"bad expression", "sessions:\n  - {id: a, url: 'http://x/', schedule: '* *'}\n",
			`entry 1 (line 2, id a): schedule "* *" has 2 fields, want 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)`},
		{"bad zone", "sessions:\n  - {id: a, url: 'http://x/', schedule: '@daily', tz: Nowhere/Town}\n",
			`entry 1 (line 2, id a): tz "Nowhere/Town" is not a known IANA zone (such as Europe/Berlin)`},
		{"bad jitter", "sessions:\n  - {id: a, url: 'http://x/', schedule: '@daily', jitter: soon}\n",
			`entry 1 (line 2, id a): jitter "soon" is not a duration like "30s" or "1h"`},
		{"tz with interval", "sessions:\n  - {id: a, url: 'http://x/', interval: 1s, tz: UTC}\n",
			`entry 1 (line 2, id a): tz is set without schedule (it applies to scheduled sessions only)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFile([]byte(tt.give), HTTPURL)
			require.ErrorIs(t, err, ErrMalformed)
			require.Equal(t, tt.want, err.Error())
		})
	}
}

// TestValidateForWrite: a jitter longer than the time between two slots
// (slots would start out of order, and before the session existed) and a
// tz on @every (it has no effect) are refused by writes; reads take them.
func TestValidateForWrite(t *testing.T) {
	base := Session{ID: "s", URL: "https://example.com/"}
	tests := []struct {
		name         string
		schedule, tz string
		jitter       time.Duration
		want         string // "" for accepted
	}{
		{"jitter within the gap", "*/10 * * * * *", "", 10 * time.Second, ""},
		{"jitter beyond the gap", "*/10 * * * * *", "", 2 * time.Minute, "jitter 2m0s is longer than the 10s between two slots"},
		{"weekdays, 30m", "0 9 * * 1-5", "Europe/Berlin", 30 * time.Minute, ""},
		{"hourly, 2h", "@hourly", "", 2 * time.Hour, "jitter 2h0m0s is longer than the 1h0m0s between two slots"},
		{"every, jitter beyond", "@every 90s", "", 2 * time.Minute, "longer than the 1m30s between two slots"},
		{"every with a zone", "@every 90m", "Europe/Berlin", 0, "tz has no effect on an @every schedule"},
		{"every in UTC", "@every 90m", "UTC", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			s.Schedule, s.TZ, s.Jitter = tt.schedule, tt.tz, Duration(tt.jitter)
			require.NoError(t, s.Validate(), "reads take it")
			err := s.ValidateForWrite()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
			_, ferr := ParseFile([]byte(fmt.Sprintf("sessions:\n  - id: s\n    url: https://example.com/\n    schedule: %q\n    tz: %q\n    jitter: %s\n", tt.schedule, tt.tz, tt.jitter)), HTTPURL)
			require.ErrorContains(t, ferr, tt.want, "sessions apply refuses it too")
		})
	}
}
