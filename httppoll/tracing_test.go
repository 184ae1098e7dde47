package httppoll

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pollworker/pollworker/poller"
)

// TestTracedPollSendsTraceparent: a poll that runs in a span (the
// coordinator's, poller.Config.TracerProvider) sends it as the W3C
// traceparent and records the status on it; an untraced poll sends none.
func TestTracedPollSendsTraceparent(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Client: f.client})

	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, time.Second), f.lease, nil)))

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, span := tp.Tracer("test").Start(ctxT(t), "poll")
	require.NoError(t, p.Poll(ctx, poller.NewTurn(sess(srv.URL, time.Second), f.lease, nil)))
	span.End()

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2)
	require.Empty(t, got[0], "untraced: no traceparent")
	sc := span.SpanContext()
	require.Equal(t, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01", got[1])
	attrs := map[string]int64{}
	for _, kv := range rec.Ended()[0].Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInt64()
	}
	require.Equal(t, int64(http.StatusAccepted), attrs["http.response.status_code"])
}
