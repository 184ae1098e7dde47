package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
)

// syncCounter is a log destination that counts its Sync calls, as an
// os.File would fsync.
type syncCounter struct {
	bytes.Buffer
	syncs int
}

func (s *syncCounter) Sync() error { s.syncs++; return nil }

// TestLoggerSyncDoesNotFsync: the worker's logger writes every entry at
// once and its Sync never syncs the destination (issue 22: a worker exited
// 1.8 s after logging "worker stopped": the deferred Sync fsynced stderr,
// redirected to a log file, on a busy disk).
func TestLoggerSyncDoesNotFsync(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		var dst syncCounter
		log := newLogger(&dst, zapcore.InfoLevel, format)
		log.Info("worker stopped")
		require.Contains(t, dst.String(), "worker stopped", "written at once, before Sync")
		require.NoError(t, log.Sync())
		require.Zero(t, dst.syncs, format)
	}
}
