// Package tracing holds the end-to-end test of the traces: a real control
// plane, a real Jaeger, the broker binary and a Go handler binary, both
// sending their spans to Jaeger over OTLP as the OTEL_* variables say. It
// reads each handled change back through Jaeger's query API, as a person
// would see it, and checks that the spans of both processes form one trace
// with the handler's function under the broker's delivery.
package tracing
