package httppoll

import (
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

func TestCutMessage(t *testing.T) {
	require.Equal(t, "short", cutMessage("short"))
	long := strings.Repeat("é", MaxMessageBytes)
	got := cutMessage(long)
	require.LessOrEqual(t, len(got), MaxMessageBytes)
	require.True(t, strings.HasSuffix(got, "…"))
}
