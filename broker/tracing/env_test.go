package tracing

import (
	"context"
	"testing"
)

// The OTEL_* variables turn tracing on only with an endpoint, and the ones
// that switch it off win.
func TestFromEnvIsOffUnlessAnEndpointIsSet(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		on   bool
		err  bool
	}{
		{name: "nothing set", env: map[string]string{}},
		{name: "an endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, on: true},
		{name: "a traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317"}, on: true},
		{name: "otlp named", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_SDK_DISABLED": "true"}},
		{name: "another exporter", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_TRACES_EXPORTER": "zipkin"}, err: true},
		{name: "http protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
				t.Setenv(k, tc.env[k])
			}
			tr, err := FromEnv(context.Background())
			if (err != nil) != tc.err {
				t.Fatalf("FromEnv: %v, want an error: %v", err, tc.err)
			}
			if err != nil {
				return
			}
			defer func() { _ = tr.Shutdown(context.Background()) }()
			if on := tr.Tracer != nil; on != tc.on {
				t.Errorf("tracing on: %v, want %v", on, tc.on)
			}
		})
	}
}
