// Package tracing makes the broker's OpenTelemetry tracer from the standard
// OTEL_* environment variables, so that a person who runs the broker turns
// traces on where every other OpenTelemetry program is configured. Tracing is
// off unless an OTLP endpoint is set; the spans themselves are made by
// broker/dispatch (docs/observability.md, "Traces").
package tracing
