package poller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pollworker/pollworker/internal/redistest"
	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/lease"
)

// TestFirstStartOnANewKeyspace: a worker started on a keyspace declared
// fresh (lease.InitKeyspace) polls a session added after it started at
// once, logs no loss quarantine, and does not call the empty index "an
// index written before loads were kept" (issue 22 item 4: both were
// logged on an empty Redis, and the first poll came 30s late).
func TestFirstStartOnANewKeyspace(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	res, err := lease.InitKeyspace(context.Background(), client, keyspace.Space{}, 0)
	require.NoError(t, err)
	require.Equal(t, 1, res.Written)

	core, logs := observer.New(zapcore.InfoLevel)
	rec := newRecorder()
	cfg := Config{Client: client, ID: "w1", Poller: rec.poller("w1"), Logger: zap.New(core)}
	r := start(t, cfg)
	require.Eventually(t, r.c.Ready, 10*time.Second, 10*time.Millisecond)
	ids := addSessions(t, client, 1, time.Second)
	require.Eventually(t, func() bool { return rec.polled(ids[0]) > 0 }, 10*time.Second, 10*time.Millisecond,
		"polled at once, not after a loss quarantine (30s)")
	require.Empty(t, logs.FilterField(zap.String("event", "quarantine")).All())
	require.Empty(t, logs.FilterMessageSnippet("loads incomplete").All())
	rec.check(t)
}
