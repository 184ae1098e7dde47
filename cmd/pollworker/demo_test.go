package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemo runs `pollworker demo` through the CLI; internal/demo's
// TestDemoPrintsWhatHappened checks every number it prints.
func TestDemo(t *testing.T) {
	r := runApp(t, "demo", "--duration", "3s", "--plain")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	for _, w := range []string{"worker-1", "worker-2", "worker-3", "worker-4"} {
		require.Contains(t, r.stdout, "  "+w+" ", "the summary lists %s", w)
	}
	for _, want := range []string{
		"stopping worker-2 gracefully",
		"worker-2 drained in",
		"the planner places them: ",
		"without worker-2 the planner puts ",
		"worker-4 joins; the planner gives it ",
		" at the end: ",
		"polls of a session while another worker's poll of it ran: 0\n",
		"polls with a fencing token older than one already used: 0\n",
		"polls with a fencing token another worker had used: 0\n",
		"0 rejected for a stale fencing token\n",
		"OK: every session was polled by one worker at a time",
	} {
		require.Contains(t, r.stdout, want)
	}
	require.Empty(t, r.stderr)
}

func TestDemoFlags(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want string
	}{
		{name: "one worker", give: []string{"--workers", "1"}, want: "pollworker: demo: --workers (1) must be between 2 and 8\n"},
		{name: "short", give: []string{"--duration", "100ms"}, want: "pollworker: demo: --duration (100ms) must be between 1s and 10m\n"},
		{name: "no sessions", give: []string{"--sessions", "0"}, want: "pollworker: demo: --sessions (0) must be between 1 and 100\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runApp(t, append([]string{"demo"}, tt.give...)...)
			require.Equal(t, exitUsage, r.code)
			require.Equal(t, tt.want, r.stderr)
		})
	}
}
