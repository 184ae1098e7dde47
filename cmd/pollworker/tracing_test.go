package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
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
