package main

import (
	"context"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/pollworker/pollworker/fleet"
	"github.com/pollworker/pollworker/session"
	"github.com/pollworker/pollworker/state"
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

// slotsView is what sessions get and list --wide show of a scheduled
// session's slots: the next slot (from now, by the schedule) and the last
// slots its holders recorded in its state.
type slotsView struct {
	// Next is the time of the next slot after now; NextStart is when it
	// starts (later by the session's jitter offset). Both are zero for a
	// paused session (Paused): it runs no slot.
	Next      time.Time `json:"next"`
	NextStart time.Time `json:"next_start"`
	Paused    bool      `json:"paused,omitempty"`
	// LastStarted and LastFinished are the last slots recorded started
	// and finished (zero: none), Outcome how the finished one ended.
	LastStarted  time.Time `json:"last_started,omitzero"`
	LastFinished time.Time `json:"last_finished,omitzero"`
	Outcome      string    `json:"outcome,omitempty"`
	// Corrupt says why the recorded slots are unreadable.
	Corrupt string `json:"corrupt,omitempty"`
}

// loadSlotViews reads the recorded slots of the scheduled sessions among
// sessions, in pipelines of stateChunk, and computes their next slots
// after now.
func loadSlotViews(ctx context.Context, a admin, sessions []session.Session, now time.Time) (map[string]*slotsView, error) {
	store := state.NewStore(a.client, a.keys)
	out := make(map[string]*slotsView)
	var ids []string
	flush := func() error {
		saved, err := store.LoadSlotsMany(ctx, ids)
		if err != nil {
			return err
		}
		for id, sl := range saved {
			v := out[id]
			v.LastStarted, v.LastFinished, v.Outcome, v.Corrupt = sl.Started, sl.Finished, sl.Outcome, sl.Corrupt
		}
		ids = ids[:0]
		return nil
	}
	for _, s := range sessions {
		sch, err := s.ParseSchedule()
		if err != nil || sch == nil {
			continue
		}
		v := &slotsView{Paused: s.Paused}
		if next := sch.Next(now); !next.IsZero() && !s.Paused {
			v.Next, v.NextStart = next, sch.Start(next)
		}
		out[s.ID] = v
		if ids = append(ids, s.ID); len(ids) == stateChunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if len(ids) > 0 {
		if err := flush(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// slotsCell is the SLOTS column of sessions list --wide.
func slotsCell(v *slotsView, now time.Time) string {
	switch {
	case v == nil:
		return "\t-"
	case v.Paused:
		return "\tnone next (paused), last " + lastSlotText(v, now)
	}
	return "\tnext " + v.NextStart.UTC().Format(time.RFC3339) + ", last " + lastSlotText(v, now)
}

// lastSlotText is the last slot run and its outcome.
func lastSlotText(v *slotsView, now time.Time) string {
	switch {
	case v.Corrupt != "":
		return "unreadable (" + v.Corrupt + ")"
	case v.LastStarted.IsZero() && v.LastFinished.IsZero():
		return "none"
	case v.LastStarted.After(v.LastFinished):
		return v.LastStarted.UTC().Format(time.RFC3339) + " started, not finished (" + ago(v.LastStarted, now) + ")"
	}
	return v.LastFinished.UTC().Format(time.RFC3339) + " " + dash(v.Outcome) + " (" + ago(v.LastFinished, now) + ")"
}

// printSlots prints a scheduled session's slots as sessions get rows.
func printSlots(row func(k, f string, a ...any), v *slotsView, now time.Time) {
	if v == nil {
		return
	}
	next := "none within five years"
	switch {
	case v.Paused:
		next = "none: paused"
	case !v.Next.IsZero():
		next = v.Next.UTC().Format(time.RFC3339)
		if !v.NextStart.Equal(v.Next) {
			next += ", starts " + v.NextStart.UTC().Format(time.RFC3339) + " (jitter)"
		}
	}
	row("next slot", "%s", next)
	row("last slot", "%s", lastSlotText(v, now))
}

// scheduledView is what explain adds for a scheduled session: its
// schedule, and its next and last slots.
type scheduledView struct {
	scheduleView
	Slots *slotsView `json:"slots"`
	now   time.Time
}

// explainedJSON is explain's JSON: the fleet's explanation and, for a
// scheduled session, its schedule and slots.
type explainedJSON struct {
	fleet.Explanation
	Scheduled *scheduledView `json:"scheduled,omitempty"`
}

// explainSchedule reads, for a scheduled session, its schedule and slots;
// nil for any other. The interval-based next poll time the fleet computes
// does not apply to it and is dropped from e: the next slot says when.
func explainSchedule(ctx context.Context, a admin, e *fleet.Explanation) (*scheduledView, error) {
	if !e.Found || e.Malformed != "" {
		return nil, nil
	}
	s, err := a.store.Get(ctx, e.Session)
	if err != nil || !s.Scheduled() {
		return nil, nil // gone meanwhile, or not scheduled: the fleet's view stands
	}
	now := time.Now()
	slots, err := loadSlotViews(ctx, a, []session.Session{s}, now)
	if err != nil {
		return nil, err
	}
	e.NextPoll = nil
	return &scheduledView{scheduleView: scheduleViewOf(s), Slots: slots[s.ID], now: now}, nil
}
