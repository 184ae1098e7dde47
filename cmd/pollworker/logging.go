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
	sink := zapcore.Lock(zapcore.AddSync(w))
	return zap.New(zapcore.NewCore(encoder, sink, level), zap.ErrorOutput(sink))
}

// redisLogger receives go-redis's own log lines (redis.SetLogger).
type redisLogger struct{ log *zap.Logger }

// Printf logs one go-redis line at debug level: while Redis is down they
// repeat what the coordinator already warns about, several times a second.
func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...))
}
