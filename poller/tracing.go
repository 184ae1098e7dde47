package poller

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the spans a Coordinator
// starts.
const tracerName = "github.com/pollworker/pollworker/poller"

// Span attribute keys: the session, the worker, the poll's fencing token,
// how many polls of the session in a row this is counting failures
// (1 after a success), and how the poll ended.
const (
	AttrSession = attribute.Key("pollworker.session")
	AttrWorker  = attribute.Key("pollworker.worker")
	AttrToken   = attribute.Key("pollworker.token")
	AttrAttempt = attribute.Key("pollworker.attempt")
	AttrOutcome = attribute.Key("pollworker.outcome")
	AttrReason  = attribute.Key("pollworker.reason")
)

// tracing starts the spans of one Coordinator: one per poll, and one
// (of no duration) per lease event. A nil *tracing starts none and costs
// a nil check.
type tracing struct {
	tracer trace.Tracer
	worker attribute.KeyValue
}

func newTracing(tp trace.TracerProvider, worker string) *tracing {
	if tp == nil {
		return nil
	}
	return &tracing{tracer: tp.Tracer(tracerName), worker: AttrWorker.String(worker)}
}

// startPoll starts the span of one poll; the poll runs in the returned
// context, so a Poller's own spans (and the HTTP poller's traceparent
// header) join it.
func (t *tracing) startPoll(ctx context.Context, session string, token int64, attempt int) (context.Context, trace.Span) {
	if t == nil {
		return ctx, nil
	}
	return t.tracer.Start(ctx, "poll", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(AttrSession.String(session), t.worker, AttrToken.Int64(token), AttrAttempt.Int(attempt)))
}

// endPoll ends a poll's span with its outcome: ok, failed (with the error),
// no_capacity (ErrNoCapacity: not sent, not a failure) or cancelled (the
// lease ended under it).
func endPoll(ctx context.Context, span trace.Span, err error) {
	if span == nil {
		return
	}
	outcome := "ok"
	switch {
	case err == nil:
	case errors.Is(err, ErrNoCapacity):
		outcome = "no_capacity"
	case ctx.Err() != nil:
		outcome = "cancelled"
	default:
		outcome = "failed"
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.SetAttributes(AttrOutcome.String(outcome))
	span.End()
}

// leaseEvent records e as a span of no duration named "lease <type>".
func (t *tracing) leaseEvent(e Event) {
	if t == nil {
		return
	}
	_, span := t.tracer.Start(context.Background(), "lease "+string(e.Type), trace.WithTimestamp(e.At),
		trace.WithAttributes(AttrSession.String(e.Session), t.worker, AttrToken.Int64(e.Token), AttrReason.String(e.Reason)))
	span.End(trace.WithTimestamp(e.At))
}
