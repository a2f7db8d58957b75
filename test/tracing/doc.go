// Package tracing holds the end-to-end tests of the traces: a real control
// plane, a real Jaeger, the broker binary and a handler process (the Go
// SDK's tracehandler, or the TypeScript SDK's tshandler run by node), both
// sending their spans to Jaeger over OTLP as the OTEL_* variables say. They
// read each handled change back through Jaeger's query API, as a person
// would see it, and check that the spans of both processes form one trace
// with the handler's function under the broker's delivery. tshandler's
// OpenTelemetry SDK and exporter are its own devDependencies, not the
// TypeScript SDK's: npm ci installs them from its package-lock.json.
package tracing
