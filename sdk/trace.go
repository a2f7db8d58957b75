package sdk

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// spanHandle names the span the function of a binding runs in: a child
// of the broker's span of the delivery (docs/observability.md, "Traces").
const spanHandle = "tether.handle"

// tracerScope is the instrumentation scope of the SDK's spans.
const tracerScope = modulePath + "/sdk"

// WithTracerProvider sets where the spans of the handler's functions go.
// The default is OpenTelemetry's global provider (otel.SetTracerProvider),
// which sends nothing unless the program set one.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp == nil {
			c.fail("WithTracerProvider: nil provider")
			return
		}
		c.tracerProvider = tp
	}
}

// traced returns ctx with the span the function of c runs in, when the
// broker sent the trace context of its delivery span; ctx as is, and a
// span that does nothing, otherwise.
func (h *Handler) traced(c *call) (context.Context, trace.Span) {
	tc := c.d.GetTraceContext()
	if len(tc) == 0 {
		return c.ctx, trace.SpanFromContext(c.ctx)
	}
	tp := h.cfg.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	ctx := propagation.TraceContext{}.Extract(c.ctx, propagation.MapCarrier(tc))
	return tp.Tracer(tracerScope).Start(ctx, spanHandle, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("tether.handler", h.name),
		attribute.String("tether.binding.id", c.d.GetBindingId()),
		attribute.String("tether.delivery.id", c.d.GetId()),
		attribute.String("tether.delivery.kind", kindLabel(c.d.GetKind())),
		attribute.Int("tether.delivery.attempt", int(c.d.GetAttempt())),
	))
}

// kindLabel names a delivery kind as the broker's spans and metrics do:
// "create", "event", "daemon-start" (DELIVERY_KIND_ cut, lower case,
// dashes).
func kindLabel(k tetherv1.DeliveryKind) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k.String(), "DELIVERY_KIND_")), "_", "-")
}

// endTraced ends the function's span with the outcome of its ack.
func endTraced(span trace.Span, ack *tetherv1.Ack) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("tether.ack.outcome", ack.GetOutcome().String()))
		if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
			span.SetStatus(codes.Error, ack.GetMessage())
		}
	}
	span.End()
}

// endSpan ends a daemon stop's span with its ack.
func (c *call) endSpan(ack *tetherv1.Ack) {
	if c.span != nil {
		endTraced(c.span, ack)
	}
}

// traceID is the id of the trace a delivery's trace context continues;
// empty without one.
func traceID(d *tetherv1.Delivery) string {
	tc := d.GetTraceContext()
	if len(tc) == 0 {
		return ""
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(tc)))
	if !sc.TraceID().IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
