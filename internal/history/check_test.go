package history

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCheck(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	p := func(s, w string, tok int64, from, to int) Poll {
		return Poll{Session: s, Worker: w, Token: tok, Start: at(from), End: at(to)}
	}
	span := func(s string, from, to int) Span {
		sp := Span{Session: s, From: at(from)}
		if to >= 0 {
			sp.To = at(to)
		}
		return sp
	}
	// clean: a handoff from w1 (token 1) to w2 (token 2), polls every 100ms,
	// back to back but not overlapping ([start, end) intervals).
	clean := []Poll{
		p("a", "w1", 1, 0, 40), p("a", "w1", 1, 100, 140), p("a", "w1", 1, 200, 240),
		p("a", "w2", 2, 240, 280), p("a", "w2", 2, 340, 380),
		p("b", "w2", 7, 50, 90), p("b", "w2", 7, 150, 190),
	}
	tests := []struct {
		name string
		give History
		want func(t *testing.T, r Report)
	}{
		{
			name: "clean history is clean",
			give: History{Polls: clean, Spans: []Span{span("a", 0, -1), span("b", 0, 200)}, End: at(400)},
			want: func(t *testing.T, r Report) {
				tot := r.Totals()
				require.Equal(t, Totals{Polls: 7, MaxGap: 100 * time.Millisecond, Handoffs: 1, MaxToken: 7, MaxTokenSession: "b"}, tot)
				require.Len(t, r.Sessions, 2)
				require.Equal(t, 100*time.Millisecond, r.Sessions[0].MaxGap) // a: every 100ms, 240->340
				require.Equal(t, 1, r.Sessions[0].Handoffs)                  // a: w1 -> w2
				require.Equal(t, int64(2), r.Sessions[0].MaxToken)
			},
		},
		{
			name: "overlap of two tokens",
			give: History{Polls: []Poll{p("a", "w1", 1, 0, 100), p("a", "w2", 2, 50, 60), p("a", "w2", 2, 70, 80)}},
			want: func(t *testing.T, r Report) {
				s := r.Sessions[0]
				require.Len(t, s.Overlaps, 2)
				require.Equal(t, int64(1), s.Overlaps[0].A.Token)
				require.Equal(t, int64(2), s.Overlaps[0].B.Token)
				require.Equal(t, 2, s.Violations())
			},
		},
		{
			name: "same token overlapping is no overlap",
			give: History{Polls: []Poll{p("a", "w1", 1, 0, 100), p("a", "w1", 1, 50, 60)}},
			want: func(t *testing.T, r Report) { require.Zero(t, r.Sessions[0].Violations()) },
		},
		{
			name: "stale token after a higher one",
			give: History{Polls: []Poll{p("a", "w2", 2, 0, 10), p("a", "w1", 1, 500, 510), p("a", "w2", 2, 600, 610)}},
			want: func(t *testing.T, r Report) {
				s := r.Sessions[0]
				require.Len(t, s.Stale, 1)
				require.Equal(t, Stale{Poll: p("a", "w1", 1, 500, 510), Max: 2}, s.Stale[0])
				require.Empty(t, s.Overlaps)
			},
		},
		{
			name: "unsorted input is sorted by start",
			give: History{Polls: []Poll{p("a", "w2", 2, 300, 310), p("a", "w1", 1, 0, 10)}},
			want: func(t *testing.T, r Report) { require.Zero(t, r.Sessions[0].Violations()) },
		},
		{
			name: "handoffs count changes of worker between consecutive polls",
			give: History{Polls: []Poll{
				p("a", "w1", 1, 0, 10), p("a", "w2", 2, 100, 110), p("a", "w2", 2, 200, 210),
				p("a", "w1", 3, 300, 310), p("b", "w3", 1, 0, 10),
			}},
			want: func(t *testing.T, r Report) {
				require.Equal(t, 2, r.Sessions[0].Handoffs)
				require.Zero(t, r.Sessions[1].Handoffs)
				tot := r.Totals()
				require.Equal(t, 2, tot.Handoffs)
				require.Equal(t, int64(3), tot.MaxToken)
				require.Equal(t, "a", tot.MaxTokenSession)
			},
		},
		{
			name: "token shared by two workers",
			give: History{Polls: []Poll{p("a", "w1", 3, 0, 10), p("a", "w2", 3, 100, 110)}},
			want: func(t *testing.T, r Report) {
				require.Equal(t, []Poll{p("a", "w2", 3, 100, 110)}, r.Sessions[0].SharedTokens)
			},
		},
		{
			name: "poll past deadline: a newer acquisition had happened",
			give: History{Polls: []Poll{
				{Session: "a", Worker: "w1", Token: 1, Start: at(0), End: at(5), FenceAtStart: 1},
				{Session: "a", Worker: "w1", Token: 1, Start: at(100), End: at(105), FenceAtStart: 2},
			}},
			want: func(t *testing.T, r Report) {
				require.Len(t, r.Sessions[0].PastDeadline, 1)
				require.Equal(t, at(100), r.Sessions[0].PastDeadline[0].Start)
				require.Zero(t, r.Sessions[0].Violations(), "counted apart")
			},
		},
		{
			name: "session never polled",
			give: History{Polls: clean, Spans: []Span{span("a", 0, -1), span("c", 100, -1)}, End: at(400)},
			want: func(t *testing.T, r Report) {
				require.Equal(t, 1, r.Totals().NeverPolled)
				c := r.Sessions[2]
				require.Equal(t, "c", c.Session)
				require.True(t, c.NeverPolled)
				require.Equal(t, 300*time.Millisecond, c.MaxGap)
			},
		},
		{
			name: "short span is not required",
			give: History{Spans: []Span{span("c", 100, 150)}, End: at(400), MinSpan: 100 * time.Millisecond},
			want: func(t *testing.T, r Report) { require.Zero(t, r.Totals().NeverPolled) },
		},
		{
			name: "largest unowned gap, with a pause between two spans",
			give: History{
				Polls: []Poll{p("a", "w1", 1, 10, 20), p("a", "w1", 1, 110, 120), p("a", "w2", 2, 2110, 2120), p("a", "w2", 2, 5000, 5010)},
				Spans: []Span{span("a", 0, 2200), span("a", 4900, -1)},
				End:   at(5100),
			},
			want: func(t *testing.T, r Report) {
				require.Equal(t, 2*time.Second, r.Sessions[0].MaxGap, "110 -> 2110; 2200 -> 4900 is paused")
				require.False(t, r.Sessions[0].NeverPolled)
			},
		},
		{
			name: "gap up to the end of an open span",
			give: History{Polls: []Poll{p("a", "w1", 1, 10, 20)}, Spans: []Span{span("a", 0, -1)}, End: at(3010)},
			want: func(t *testing.T, r Report) { require.Equal(t, 3*time.Second, r.Sessions[0].MaxGap) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want(t, Check(tt.give))
		})
	}
}
