package main

import (
	"context"
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger returns a logger writing to w at level, as JSON lines or, for
// format "console", as human-readable lines.
func newLogger(w io.Writer, level zapcore.Level, format string) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	enc.EncodeDuration = zapcore.StringDurationEncoder
	var encoder zapcore.Encoder
	if format == "console" {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	} else {
		encoder = zapcore.NewJSONEncoder(enc)
	}
	sink := zapcore.Lock(zapcore.AddSync(writeOnly{w}))
	return zap.New(zapcore.NewCore(encoder, sink, level), zap.ErrorOutput(sink))
}

// writeOnly hides the Sync method of its writer: every entry is written
// at once, unbuffered, so the logger's Sync has nothing to flush, and
// os.File's Sync is an fsync, which for a stderr redirected to a file
// waited for the disk after "worker stopped" (1.8 s on a busy machine).
type writeOnly struct{ w io.Writer }

func (w writeOnly) Write(p []byte) (int, error) { return w.w.Write(p) }

// redisLogger receives go-redis's own log lines (redis.SetLogger).
type redisLogger struct{ log *zap.Logger }

// Printf logs one go-redis line at debug level: while Redis is down they
// repeat what the coordinator already warns about, several times a second.
func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...))
}
