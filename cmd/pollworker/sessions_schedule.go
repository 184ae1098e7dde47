package main

import (
	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/session"
)

// scheduleFlags are the flags of sessions add that make a scheduled
// session (instead of --interval).
func scheduleFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "schedule", Usage: "instead of --interval: poll at the slots of a cron expression, 5 fields or 6 (seconds first), " +
			"@hourly/@daily/@weekly/@monthly/@every 90s; H in a field picks a value by the id's hash (e.g. 'H * * * *')"},
		&cli.StringFlag{Name: "tz", Usage: "IANA zone the --schedule is read in (default UTC), e.g. Europe/Berlin"},
		&cli.DurationFlag{Name: "jitter", Usage: "start every slot the same offset in [0, jitter) later, picked by the id's hash"},
		&cli.StringFlag{Name: "catchup", Usage: "slots nobody ran (fleet down, failover, data loss): skip, latest (default: the most recent once) or all (each, in order)"},
		&cli.DurationFlag{Name: "catchup-window", Usage: "slots due longer ago than this are never caught up (default 1h, at most 168h)"},
	}
}

// withScheduleFlags sets the schedule's fields of s from cmd's flags.
func withScheduleFlags(s session.Session, cmd *cli.Command) session.Session {
	s.Schedule = cmd.String("schedule")
	s.TZ = cmd.String("tz")
	s.Jitter = session.Duration(cmd.Duration("jitter"))
	s.CatchUp = cmd.String("catchup")
	s.CatchUpWindow = session.Duration(cmd.Duration("catchup-window"))
	return s
}

// timingText is how sessions list shows when a session polls: its
// interval, or its schedule (with its zone when not UTC).
func timingText(s session.Session) string {
	if !s.Scheduled() {
		return s.Interval.D().String()
	}
	t := "cron " + s.Schedule
	if s.TZ != "" && s.TZ != "UTC" {
		t += " (" + s.TZ + ")"
	}
	return t
}

// scheduleChanges are the diff lines of apply for the schedule's fields.
func scheduleChanges(old, want session.Session, add func(field, from, to string)) {
	add("schedule", dash(old.Schedule), dash(want.Schedule))
	add("tz", dash(old.TZ), dash(want.TZ))
	add("jitter", durationOrDash(old.Jitter), durationOrDash(want.Jitter))
	add("catchup", dash(old.CatchUp), dash(want.CatchUp))
	add("catchup_window", durationOrDash(old.CatchUpWindow), durationOrDash(want.CatchUpWindow))
}

func durationOrDash(d session.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.D().String()
}

// scheduleView is the schedule of a session as sessions get and list
// --json print it.
type scheduleView struct {
	Schedule      string `json:"schedule,omitempty"`
	TZ            string `json:"tz,omitempty"`
	Jitter        string `json:"jitter,omitempty"`
	CatchUp       string `json:"catchup,omitempty"`
	CatchUpWindow string `json:"catchup_window,omitempty"`
}

func scheduleViewOf(s session.Session) scheduleView {
	if !s.Scheduled() {
		return scheduleView{}
	}
	v := scheduleView{Schedule: s.Schedule, TZ: s.TZ, CatchUp: string(s.CatchUpPolicy()), CatchUpWindow: s.CatchUpWindowOrDefault().String()}
	if v.TZ == "" {
		v.TZ = "UTC"
	}
	if s.Jitter != 0 {
		v.Jitter = s.Jitter.D().String()
	}
	return v
}
