package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is the service the broker's spans belong to when
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) names none.
const DefaultServiceName = "tether-broker"

// ScopeName is the instrumentation scope of the broker's spans.
const ScopeName = "github.com/tether-dev/tether/broker"

// Tracer is the broker's tracer and what ends it.
type Tracer struct {
	// Tracer makes the spans; nil when tracing is off.
	Tracer trace.Tracer
	// Shutdown sends the spans still buffered and stops the exporter.
	Shutdown func(context.Context) error
}

// FromEnv makes the broker's tracer as the OTEL_* variables say. Tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, unless OTEL_SDK_DISABLED is
// "true" or OTEL_TRACES_EXPORTER is "none"; the spans go over OTLP/gRPC,
// the only exporter and protocol the broker has. The exporter, the sampler
// (OTEL_TRACES_SAMPLER), the batching (OTEL_BSP_*) and the resource
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) read the rest of the
// variables themselves, as the OpenTelemetry SDK defines them. The exporter
// connects lazily: a collector that is down loses spans, never the broker.
func FromEnv(ctx context.Context) (Tracer, error) {
	tp, err := ProviderFromEnv(ctx, DefaultServiceName)
	if tp == nil || err != nil {
		return Tracer{Shutdown: func(context.Context) error { return nil }}, err
	}
	return Tracer{Tracer: tp.Tracer(ScopeName), Shutdown: tp.Shutdown}, nil
}

// ProviderFromEnv is the tracer provider FromEnv makes, for another
// program of Tether's (a Go handler) that reads the same variables:
// nil when they leave tracing off. service names the spans' service when
// the variables name none.
func ProviderFromEnv(ctx context.Context, service string) (*sdktrace.TracerProvider, error) {
	on, err := enabled()
	if !on || err != nil {
		return nil, err
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("making the OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", service)),
		resource.Environment())
	if err != nil {
		return nil, fmt.Errorf("reading the trace resource from OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// enabled tells whether the variables turn tracing on, and fails on what
// the broker cannot do.
func enabled() (bool, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return false, nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: the broker exports traces over OTLP only (\"otlp\" or \"none\")", exp)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(os.Getenv(k)); p != "" && p != "grpc" {
			return false, fmt.Errorf("%s=%q: the broker sends OTLP over gRPC only (\"grpc\")", k, p)
		}
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return false, nil
	}
	return true, nil
}
