package tracing

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// A line logged under a span names its trace; one logged outside any
// span (tracing off) names none.
func TestLoggerNamesTheTraceOfTheSpan(t *testing.T) {
	var out bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Debug})
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "s")
	defer span.End()

	Logger(ctx, log).Info("traced")
	Logger(context.Background(), log).Info("untraced")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines %q, want 2", lines)
	}
	if want := "trace_id=" + span.SpanContext().TraceID().String(); !strings.Contains(lines[0], want) {
		t.Errorf("the traced line %q does not have %s", lines[0], want)
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("the untraced line %q names a trace", lines[1])
	}
}
