package demo

import (
	"fmt"
	"io"
	"time"

	"github.com/pollworker/pollworker/internal/history"
)

// maxProblems bounds the violations the summary describes.
const maxProblems = 5

// summary prints the totals of res, checked by package history, and
// returns an error wrapping ErrBroken if the promise was broken.
func (d *demo) summary(out io.Writer, res *Result) error {
	rep := history.Check(res.History)
	t := rep.Totals()
	polls, failed := map[string]int{}, map[string]int{}
	aborted := 0
	for _, p := range res.History.Polls {
		polls[p.Worker]++
		if p.Abandoned {
			aborted++
		}
	}
	for _, p := range res.Failed {
		failed[p.Worker]++
	}
	elapsed := res.History.End.Sub(res.Start)
	fmt.Fprintf(out, "\nsummary after %v: %d sessions, %d workers\n", elapsed.Round(100*time.Millisecond), len(d.sessions), len(d.snapshot()))
	for _, w := range d.snapshot() {
		note := ""
		switch {
		case w.joinedAt > time.Second/2:
			note = fmt.Sprintf(" (joined at %v)", w.joinedAt.Round(100*time.Millisecond))
		case w.name == Stopped && w.stopAt.Load() > 0:
			note = fmt.Sprintf(" (stopped at %v)", time.Duration(w.stopAt.Load()).Round(100*time.Millisecond))
		}
		fmt.Fprintf(out, "  %-9s %5d polls, %d failed%s\n", w.name, polls[w.name], failed[w.name], note)
	}
	fmt.Fprintf(out, "  handoffs seen: %d (a poll by another worker than the session's previous poll)\n", t.Handoffs)
	fmt.Fprintf(out, "  highest fencing token: %d (session %s)\n", t.MaxToken, dash(t.MaxTokenSession))
	fmt.Fprintf(out, "  polls aborted by a handoff or shutdown: %d\n", aborted)
	fmt.Fprintf(out, "  targets: %d requests, %d rejected for a stale fencing token\n", res.Requests, res.Rejected)
	if res.StreamLen >= 0 {
		fmt.Fprintf(out, "  results stream %s: %d entries\n", d.keys.Results(), res.StreamLen)
	}
	fmt.Fprintf(out, "  polls of a session while another worker's poll of it ran: %d\n", t.Overlaps)
	fmt.Fprintf(out, "  polls with a fencing token older than one already used: %d\n", t.Stale)
	fmt.Fprintf(out, "  polls with a fencing token another worker had used: %d\n", t.SharedTokens)
	problems := 0
	for _, s := range rep.Sessions {
		for _, o := range s.Overlaps {
			if problems++; problems <= maxProblems {
				fmt.Fprintf(out, "  ! %s: %s polled it (token %d) at %v while %s's poll (token %d) ran\n",
					s.Session, o.B.Worker, o.B.Token, d.at(res, o.B.Start), o.A.Worker, o.A.Token)
			}
		}
		for _, st := range s.Stale {
			if problems++; problems <= maxProblems {
				fmt.Fprintf(out, "  ! %s: %s polled it with token %d at %v after token %d was used\n",
					s.Session, st.Poll.Worker, st.Poll.Token, d.at(res, st.Poll.Start), st.Max)
			}
		}
		for _, p := range s.SharedTokens {
			if problems++; problems <= maxProblems {
				fmt.Fprintf(out, "  ! %s: %s polled it at %v with token %d, already used by another worker\n",
					s.Session, p.Worker, d.at(res, p.Start), p.Token)
			}
		}
	}
	if problems > 0 || res.Rejected > 0 {
		return fmt.Errorf("%w: %d overlapping polls, %d stale tokens, %d shared tokens, %d rejected by targets",
			ErrBroken, t.Overlaps, t.Stale, t.SharedTokens, res.Rejected)
	}
	fmt.Fprintln(out, "OK: every session was polled by one worker at a time, with increasing fencing tokens.")
	return nil
}

// at formats a time of the run as a time since its start.
func (d *demo) at(res *Result, t time.Time) time.Duration {
	return t.Sub(res.Start).Round(time.Millisecond)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
