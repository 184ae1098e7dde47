package history

import (
	"sort"
	"time"
)

// Poll is one request as the downstream saw it: Start when it arrived, End
// when the handler returned, both read from the monotonic clock of the
// recording process.
type Poll struct {
	Session string
	Worker  string
	Token   int64
	Start   time.Time
	End     time.Time
	// FenceAtStart is the session's last token read from Redis when the
	// poll arrived (0 when unknown): its fencing record's, or a value above
	// the poll's token when the lease found there was taken after the
	// poll's token was minted. A token below it means a newer acquisition
	// had already happened: the poll ran past its lease.
	FenceAtStart int64
	// Abandoned is set when the poller dropped the request (closed the
	// connection) before the downstream had finished it.
	Abandoned bool
}

// Span is a period during which a session exists and is not paused, so it
// must be polled. To is zero while the session is still active when the
// history ends. A session may have several spans (pause, resume).
type Span struct {
	Session  string
	From, To time.Time
}

// History is the input of Check.
type History struct {
	Polls []Poll
	// Leases lists the changes of lease holders as the workers reported
	// them, in the order they were recorded; Check does not read them,
	// Holders does.
	Leases []LeaseChange
	// Spans lists when each session should be polled.
	Spans []Span
	// End closes the spans whose To is zero.
	End time.Time
	// MinSpan: spans shorter than this are not required to be polled (a
	// session added and removed at once). Zero requires every span.
	MinSpan time.Duration
}

// Overlap is two polls of one session with different tokens in flight at
// the same time.
type Overlap struct {
	A, B Poll
}

// Stale is a poll whose token was lower than the highest token of its
// session among the polls that arrived before it.
type Stale struct {
	Poll Poll
	Max  int64
}

// SessionReport is what Check found for one session.
type SessionReport struct {
	Session string
	Polls   int
	// Overlaps of polls with different tokens.
	Overlaps []Overlap
	// Stale polls (token went backwards).
	Stale []Stale
	// SharedTokens are polls whose token an earlier poll by another worker
	// had used.
	SharedTokens []Poll
	// PastDeadline are polls that arrived after a newer acquisition of the
	// session (Token < FenceAtStart).
	PastDeadline []Poll
	// NeverPolled is set when a span of at least MinSpan saw no poll start.
	NeverPolled bool
	// MaxGap is the longest time within a span without a poll starting,
	// counting from the span's start and up to its end; it includes one
	// polling interval.
	MaxGap time.Duration
	// Handoffs counts the polls by another worker than the session's
	// previous poll.
	Handoffs int
	// MaxToken is the highest fencing token of the session's polls.
	MaxToken int64
}

// Violations counts the safety violations (overlaps, stale polls, shared
// tokens); polls past deadline are counted apart.
func (r SessionReport) Violations() int {
	return len(r.Overlaps) + len(r.Stale) + len(r.SharedTokens)
}

// Report is the result of Check over a whole history.
type Report struct {
	// Sessions is sorted by session id; it lists every session that was
	// polled or had a span.
	Sessions []SessionReport
}

// Totals sums a Report.
type Totals struct {
	Polls, Overlaps, Stale, SharedTokens, PastDeadline, NeverPolled, Handoffs int
	MaxGap                                                                    time.Duration
	// MaxToken is the highest token of any poll, MaxTokenSession the first
	// session (by id) polled with it.
	MaxToken        int64
	MaxTokenSession string
}

// Totals sums the per-session figures.
func (r Report) Totals() Totals {
	var t Totals
	for _, s := range r.Sessions {
		t.Polls += s.Polls
		t.Overlaps += len(s.Overlaps)
		t.Stale += len(s.Stale)
		t.SharedTokens += len(s.SharedTokens)
		t.PastDeadline += len(s.PastDeadline)
		if s.NeverPolled {
			t.NeverPolled++
		}
		t.MaxGap = max(t.MaxGap, s.MaxGap)
		t.Handoffs += s.Handoffs
		if s.MaxToken > t.MaxToken {
			t.MaxToken, t.MaxTokenSession = s.MaxToken, s.Session
		}
	}
	return t
}

// Check finds, per session, overlapping polls with different tokens, stale
// and shared tokens, polls past their lease, spans never polled, the
// largest unowned gap and the handoffs. It does not modify h.
func Check(h History) Report {
	bySession := map[string][]Poll{}
	for _, p := range h.Polls {
		bySession[p.Session] = append(bySession[p.Session], p)
	}
	spans := map[string][]Span{}
	for _, s := range h.Spans {
		spans[s.Session] = append(spans[s.Session], s)
	}
	ids := make([]string, 0, len(bySession)+len(spans))
	for id := range bySession {
		ids = append(ids, id)
	}
	for id := range spans {
		if _, ok := bySession[id]; !ok {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	rep := Report{Sessions: make([]SessionReport, 0, len(ids))}
	for _, id := range ids {
		polls := append([]Poll(nil), bySession[id]...)
		sort.SliceStable(polls, func(i, j int) bool { return polls[i].Start.Before(polls[j].Start) })
		sr := SessionReport{Session: id, Polls: len(polls)}
		checkSafety(&sr, polls)
		for _, sp := range spans[id] {
			to := sp.To
			if to.IsZero() {
				to = h.End
			}
			gap, polled := spanGap(polls, sp.From, to)
			sr.MaxGap = max(sr.MaxGap, gap)
			if !polled && to.Sub(sp.From) >= h.MinSpan {
				sr.NeverPolled = true
			}
		}
		rep.Sessions = append(rep.Sessions, sr)
	}
	return rep
}

// checkSafety fills the safety findings of one session; polls are sorted by
// Start.
func checkSafety(sr *SessionReport, polls []Poll) {
	var maxTok int64
	owner := map[int64]string{}
	// active holds the polls that may still be in flight, for the sweep.
	var active []Poll
	for i, p := range polls {
		if i > 0 && polls[i-1].Worker != p.Worker {
			sr.Handoffs++
		}
		if p.Token < maxTok {
			sr.Stale = append(sr.Stale, Stale{Poll: p, Max: maxTok})
		}
		maxTok = max(maxTok, p.Token)
		if w, ok := owner[p.Token]; ok && w != p.Worker {
			sr.SharedTokens = append(sr.SharedTokens, p)
		} else if !ok {
			owner[p.Token] = p.Worker
		}
		if p.FenceAtStart > 0 && p.Token < p.FenceAtStart {
			sr.PastDeadline = append(sr.PastDeadline, p)
		}
		kept := active[:0]
		for _, a := range active {
			if a.End.After(p.Start) { // [a.Start, a.End) meets p.Start
				kept = append(kept, a)
				if a.Token != p.Token {
					sr.Overlaps = append(sr.Overlaps, Overlap{A: a, B: p})
				}
			}
		}
		active = append(kept, p)
	}
	sr.MaxToken = maxTok
}

// spanGap returns the longest stretch of [from, to] without a poll start,
// and whether any poll started within it.
func spanGap(polls []Poll, from, to time.Time) (time.Duration, bool) {
	last, polled := from, false
	var gap time.Duration
	for _, p := range polls {
		if p.Start.Before(from) {
			continue
		}
		if p.Start.After(to) {
			break
		}
		gap = max(gap, p.Start.Sub(last))
		last, polled = p.Start, true
	}
	return max(gap, to.Sub(last)), polled
}
