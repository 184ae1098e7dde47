package poller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func attrsOf(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestTracingPollSpans(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		err     error
		outcome string
		status  codes.Code
	}{
		{"ok", context.Background(), nil, "ok", codes.Unset},
		{"failed", context.Background(), errors.New("503 Service Unavailable"), "failed", codes.Error},
		{"no capacity is not a failure", context.Background(), ErrNoCapacity, "no_capacity", codes.Unset},
		{"cut short by the lease", cancelled, context.Canceled, "cancelled", codes.Unset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tr := newTracing(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), "w1")
			ctx, span := tr.startPoll(tt.ctx, "s1", 42, 3)
			require.True(t, span.SpanContext().IsValid())
			endPoll(ctx, span, tt.err)
			ended := rec.Ended()
			require.Len(t, ended, 1)
			s := ended[0]
			require.Equal(t, "poll", s.Name())
			a := attrsOf(s.Attributes())
			require.Equal(t, "s1", a[AttrSession].AsString())
			require.Equal(t, "w1", a[AttrWorker].AsString())
			require.Equal(t, int64(42), a[AttrToken].AsInt64())
			require.Equal(t, int64(3), a[AttrAttempt].AsInt64())
			require.Equal(t, tt.outcome, a[AttrOutcome].AsString())
			require.Equal(t, tt.status, s.Status().Code)
		})
	}
}

func TestTracingLeaseEventAndOff(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := newTracing(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), "w1")
	at := time.Unix(1_800_000_000, 0)
	tr.leaseEvent(Event{Type: EventLost, Session: "s1", Token: 7, Reason: "renewal refused", At: at})
	require.Len(t, rec.Ended(), 1)
	s := rec.Ended()[0]
	require.Equal(t, "lease lost", s.Name())
	require.Equal(t, at, s.StartTime())
	require.Equal(t, "renewal refused", attrsOf(s.Attributes())[AttrReason].AsString())

	// Off: no provider, no span, the context unchanged.
	var off *tracing = newTracing(nil, "w1")
	ctx := context.Background()
	got, span := off.startPoll(ctx, "s1", 1, 1)
	require.Nil(t, span)
	require.Equal(t, ctx, got)
	endPoll(got, span, errors.New("x"))
	off.leaseEvent(Event{Type: EventAcquired})
}
