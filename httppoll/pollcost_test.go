package httppoll

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pollworker/pollworker/results"
)

// BenchmarkPollCPU measures the CPU a poll costs this process, stateless
// (Poll) and with saved state (the coordinator's PollState path, a slot
// in memory), against a local target answering 204.
//
// Run: go test -run '^$' -bench BenchmarkPollCPU -benchmem ./httppoll
func BenchmarkPollCPU(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	b.Cleanup(srv.Close)
	for _, stateful := range []bool{false, true} {
		name := "stateless"
		if stateful {
			name = "stateful"
		}
		b.Run(name, func(b *testing.B) {
			p, err := New(Config{Worker: "w1", Record: results.RecordNone})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(p.CloseIdleConnections)
			s := sess(srv.URL, time.Second)
			slot := &fakeSlot{}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if stateful {
					_ = p.poll(ctx, s, nil, slot)
				} else {
					_ = p.Poll(ctx, s, nil)
				}
			}
		})
	}
}

// BenchmarkPollCPUTraced is BenchmarkPollCPU's stateless poll in a span, as
// the coordinator starts one per poll when poller.Config.TracerProvider is
// set: sampled 1 % (what a busy fleet would run) and always (every poll
// recorded and its traceparent sent). Compare with BenchmarkPollCPU/
// stateless in the same run.
//
// Run: go test -run '^$' -bench 'BenchmarkPollCPU' -benchmem ./httppoll
func BenchmarkPollCPUTraced(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	b.Cleanup(srv.Close)
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"sampled-1pct", sdktrace.TraceIDRatioBased(0.01)}, {"sampled-all", sdktrace.AlwaysSample()}} {
		b.Run(tc.name, func(b *testing.B) {
			p, err := New(Config{Worker: "w1", Record: results.RecordNone})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(p.CloseIdleConnections)
			// Spans are batched to an exporter that drops them: the cost
			// measured is this process's, not a collector's.
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tc.sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			tracer := tp.Tracer("bench")
			s := sess(srv.URL, time.Second)
			b.ReportAllocs()
			for b.Loop() {
				ctx, span := tracer.Start(context.Background(), "poll")
				_ = p.Poll(ctx, s, nil)
				span.End()
			}
		})
	}
}
