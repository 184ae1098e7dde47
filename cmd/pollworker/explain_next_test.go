package main

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/httppoll"
)

// TestExplainNextPoll is issue 22 item 2: explain says when the next poll
// is due and why when something holds it back (a handoff mark, a
// backoff), and never shows more than a successor keeps of a mark.
func TestExplainNextPoll(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	ms := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).UnixMilli(), 10) }
	tests := []struct {
		name    string
		mark    string         // handoff mark of an unheld session, "" for a held one
		st      httppoll.State // saved state of a held one
		want    int64          // due in ms; -1: nothing said
		wantWhy string         // part of the reason
	}{
		{"mark with a due time", ms(-time.Second) + ":" + ms(time.Second), httppoll.State{}, 1000, "handoff mark"},
		{"mark of a backoff: bounded", ms(0) + ":" + ms(time.Minute), httppoll.State{}, 2200, "at most one interval"},
		{"overdue mark", ms(-5*time.Second) + ":" + ms(-time.Second), httppoll.State{}, 0, "handoff mark"},
		{"mark without a due time", ms(0), httppoll.State{}, -1, ""},
		{"held, polling fine", "", httppoll.State{Polled: now}, -1, ""},
		{"held, backing off", "", httppoll.State{Polled: now.Add(-time.Second), Failures: 5, Error: "refused", BackoffMS: 62_000}, 63_000, "5 polls failed in a row (last refused)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *nextPollFacts
			if tt.mark != "" {
				got = nextFromMark(tt.mark, 2*time.Second, now)
			} else {
				got = nextFromBackoff(tt.st, 2*time.Second, now)
			}
			if tt.want < 0 {
				require.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			require.Equal(t, tt.want, got.DueInMs)
			require.Contains(t, got.Why, tt.wantWhy)
		})
	}
}
