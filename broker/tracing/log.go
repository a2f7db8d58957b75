package tracing

import (
	"context"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"
)

// LogKey is the field that names, in a log line, the trace the line is
// about; the SDKs name it the same.
const LogKey = "trace_id"

// Logger is log with the id of the trace of the span ctx carries, so that
// a line finds its trace; log as is when ctx carries none (tracing off).
func Logger(ctx context.Context, log hclog.Logger) hclog.Logger {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return log.With(LogKey, sc.TraceID().String())
	}
	return log
}
