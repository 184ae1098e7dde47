package failurelog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestLog(t *testing.T) {
	now := time.Unix(1000, 0)
	f := &Log{What: "recording", Now: func() time.Time { return now }}
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(core)
	step := func(ok bool, d time.Duration) {
		now = now.Add(d)
		if ok {
			f.Succeeded(log)
		} else {
			f.Failed(log)
		}
	}
	lines := func() []string {
		var out []string
		for _, e := range logs.TakeAll() {
			out = append(out, e.Message)
		}
		return out
	}
	step(true, 0)
	require.Empty(t, lines(), "a success without failures says nothing")
	step(false, 0)
	step(false, time.Second)
	require.Equal(t, []string{"recording failed; further failures are logged at debug level"}, lines())
	step(true, time.Second)
	require.Equal(t, []string{"recording works again"}, lines())
	for range 20 { // failing and working by turns, within a minute
		step(false, time.Second)
		step(true, time.Second)
	}
	require.Empty(t, lines(), "one warning and one 'works again' a minute")
	step(false, Quiet)
	require.Equal(t, []string{"recording failed; further failures are logged at debug level"}, lines(), "a run a minute after the last warning")
	step(false, time.Second)
	step(true, time.Second)
	require.Equal(t, []string{"recording works again"}, lines())
}
