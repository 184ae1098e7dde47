package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/pollworker/pollworker/internal/redistest"
)

func TestTracingFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		on   bool
		err  string
	}{
		{name: "nothing set: off", env: nil},
		{name: "an endpoint: on", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "a traces endpoint: on", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "exporter otlp: on", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "exporter none: off", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "SDK disabled: off", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "another exporter: refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "OTEL_TRACES_EXPORTER=zipkin"},
		{name: "grpc: refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			err: "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: only http/protobuf"},
		{name: "the traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, shutdown, err := tracingFromEnv(context.Background(), func(k string) string { return tt.env[k] }, "v1", "w1")
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.on, tp != nil)
			require.NoError(t, shutdown(context.Background()))
		})
	}
}

// otlpReceiver is an OTLP/HTTP trace receiver: it keeps the spans posted
// to /v1/traces.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil || req.URL.Path != "/v1/traces" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(nil)
}

// find returns the spans named name with attribute key = value.
func (r *otlpReceiver) find(name, key, value string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if s.Name != name {
			continue
		}
		for _, a := range s.Attributes {
			if a.Key == key && a.Value.GetStringValue() == value {
				out = append(out, s)
			}
		}
	}
	return out
}

// TestRunExportsTraces runs a worker with OTEL_EXPORTER_OTLP_ENDPOINT set to
// an in-test receiver: the poll spans arrive with their attributes, the
// target receives a traceparent naming one of them, and the lease
// acquisition arrives as a span too.
func TestRunExportsTraces(t *testing.T) {
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	t.Cleanup(collector.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // ms: export batches soon
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")

	var mu sync.Mutex
	var parents []string
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parents = append(parents, r.Header.Get("traceparent"))
		mu.Unlock()
	}))
	t.Cleanup(target.Close)
	srv := redistest.Start(t)
	addSession(t, srv.Client(t), "traced", target.URL)
	startRunWorker(t, srv.URL(), "tw1")

	// A traceparent the target received names a poll span the receiver got.
	require.Eventually(t, func() bool {
		mu.Lock()
		got := append([]string(nil), parents...)
		mu.Unlock()
		for _, s := range recv.find("poll", "pollworker.session", "traced") {
			want := fmt.Sprintf("00-%x-%x-01", s.TraceId, s.SpanId)
			if slices.Contains(got, want) {
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "no poll span matching a traceparent the target received")
	polls := recv.find("poll", "pollworker.session", "traced")
	attrs := map[string]*commonpb.AnyValue{}
	for _, a := range polls[0].Attributes {
		attrs[a.Key] = a.Value
	}
	require.Equal(t, "tw1", attrs["pollworker.worker"].GetStringValue())
	require.Positive(t, attrs["pollworker.token"].GetIntValue())
	require.Equal(t, int64(1), attrs["pollworker.attempt"].GetIntValue())
	require.Equal(t, "ok", attrs["pollworker.outcome"].GetStringValue())
	require.Equal(t, int64(http.StatusOK), attrs["http.response.status_code"].GetIntValue())
	require.Eventually(t, func() bool { return len(recv.find("lease acquired", "pollworker.session", "traced")) > 0 },
		10*time.Second, 20*time.Millisecond, "no lease acquired span")
}
