package httppoll

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestTransitionLog: a first failure is logged at warn with its message,
// its recovery too; a session flapping within a minute logs once, and a
// recovery whose failure was not logged is not logged either.
func TestTransitionLog(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	tl := transitionLog{every: time.Minute, last: map[string]time.Time{}, open: map[string]bool{}}
	ok, bad := State{}, State{Failures: 1, Status: 401, Error: "status", Message: "httppoll: unexpected status: 401 Unauthorized (expect 200-399)"}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		prev, next State
		at         time.Duration
	}{
		{ok, bad, 0},                 // logged: failing
		{bad, State{Failures: 2}, 1}, // still failing: nothing
		{bad, ok, 2 * time.Second},   // logged: recovered
		{ok, bad, 3 * time.Second},   // within the minute: not logged
		{bad, ok, 4 * time.Second},   // its failure was not logged: not logged
		{ok, bad, 2 * time.Minute},   // logged
	}
	for _, s := range steps {
		tl.log(log, "s1", s.prev, s.next, t0.Add(s.at))
	}
	var got []string
	for _, e := range logs.All() {
		require.Equal(t, zapcore.WarnLevel, e.Level)
		got = append(got, e.Message)
	}
	require.Equal(t, []string{"session failing", "session recovered", "session failing"}, got)
	require.Equal(t, bad.Message, logs.All()[0].ContextMap()["message"])
}

// TestTransitionLogSumsUpAStorm: past its lines per window, a window's
// failures and recoveries are summed up in one line each, logged at the
// first poll after the window, naming the count, the classes and the first
// sessions; every transition is in a line or a summary.
func TestTransitionLogSumsUpAStorm(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	tl := transitionLog{every: time.Minute, burst: 3, window: 10 * time.Second, last: map[string]time.Time{}, open: map[string]bool{}}
	ok, refused := State{}, State{Failures: 1, Error: "refused"}
	t0 := time.Unix(1000, 0)
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for i, id := range ids {
		tl.log(log, id, ok, refused, t0.Add(time.Duration(i)*time.Millisecond))
	}
	type line struct {
		msg      string
		sessions int64
		first    []string
		classes  string
	}
	lines := func() []line {
		var out []line
		for _, e := range logs.TakeAll() {
			require.Equal(t, zapcore.WarnLevel, e.Level)
			l := line{msg: e.Message}
			if n, ok := e.ContextMap()["sessions"].(int64); ok {
				l.sessions = n
				for _, f := range e.ContextMap()["first"].([]any) {
					l.first = append(l.first, f.(string))
				}
				if c, ok := e.ContextMap()["classes"]; ok {
					l.classes = fmt.Sprint(c)
				}
			}
			out = append(out, l)
		}
		return out
	}
	one := func(msg string) line { return line{msg: msg} }
	require.Equal(t, []line{one("session failing"), one("session failing"), one("session failing")}, lines())

	// Within the window a poll without a transition logs nothing; the
	// first one after it logs the summary.
	tl.log(log, "a", refused, refused, t0.Add(9*time.Second))
	require.Empty(t, lines())
	tl.log(log, "a", refused, refused, t0.Add(10*time.Second))
	require.Equal(t, []line{{"sessions failing, more than the log shows one by one", 5, []string{"d", "e", "f", "g", "h"}, "map[refused:5]"}}, lines())

	// All recover in a new window: three lines, then the rest summed up,
	// the summarized failures among them.
	for i, id := range ids {
		tl.log(log, id, refused, ok, t0.Add(20*time.Second+time.Duration(i)*time.Millisecond))
	}
	tl.log(log, "a", ok, ok, t0.Add(31*time.Second))
	require.Equal(t, []line{one("session recovered"), one("session recovered"), one("session recovered"),
		{"sessions recovered, more than the log shows one by one", 5, []string{"d", "e", "f", "g", "h"}, ""}}, lines())
}

func TestCutMessage(t *testing.T) {
	require.Equal(t, "short", cutMessage("short"))
	long := strings.Repeat("é", MaxMessageBytes)
	got := cutMessage(long)
	require.LessOrEqual(t, len(got), MaxMessageBytes)
	require.True(t, strings.HasSuffix(got, "…"))
}
