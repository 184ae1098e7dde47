package main

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracingFromEnv builds the worker's OpenTelemetry tracer provider from the
// standard OTEL_* environment variables only (the SDK's and the OTLP
// exporter's own): tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set or OTEL_TRACES_EXPORTER is
// "otlp", and off (nil provider, nothing started) otherwise, or when
// OTEL_SDK_DISABLED is "true" or OTEL_TRACES_EXPORTER is "none". Spans go
// over OTLP/HTTP (protobuf) in batches; the sampler is OTEL_TRACES_SAMPLER
// and OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on); the
// resource is service.name=pollworker, service.version and
// service.instance.id, then OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
// shutdown flushes the spans not yet sent.
func tracingFromEnv(ctx context.Context, getenv func(string) string, version, instance string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if want, err := tracingWanted(getenv); err != nil || !want {
		return nil, noop, err
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(k); p != "" {
			if p != "http/protobuf" {
				return nil, noop, fmt.Errorf("%s=%s: only http/protobuf is supported (OTLP over HTTP)", k, p)
			}
			break
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, noop, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "pollworker"), attribute.String("service.version", version)}
	if instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", instance))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil {
		return nil, noop, fmt.Errorf("OpenTelemetry resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return p, p.Shutdown, nil
}

// tracingWanted says whether the OTEL_* environment asks for traces; an
// exporter other than otlp or none is refused.
func tracingWanted(getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch e := strings.ToLower(getenv("OTEL_TRACES_EXPORTER")); e {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: pollworker exports traces with otlp (or none)", e)
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
}
