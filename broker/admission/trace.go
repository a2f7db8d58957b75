package admission

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/tether-dev/tether/broker/tracing"
)

// The spans of a review (docs/observability.md, "Traces"): spanReview is
// the API server's request, from its signed path to the answer written;
// the dispatcher's delivery to the handler (tether.deliver, tether.ack)
// and spanAnswer, the answer made of the handler's (or of the failure
// policy), are its children.
const (
	spanReview = "tether.review"
	spanAnswer = "tether.answer"
)

// The attributes of a review's spans; tether.handler and tether.binding.id
// and the k8s.* ones are named as on the spans of a pass.
const (
	attrOperation = attribute.Key("tether.admission.operation")
	attrUID       = attribute.Key("tether.admission.uid")
	attrResult    = attribute.Key("tether.admission.result")
	attrReason    = attribute.Key("tether.admission.failure_reason")
	attrPolicy    = attribute.Key("tether.admission.failure_policy")
	attrStatus    = attribute.Key("http.response.status_code")
)

// noSpan is the span of a review that is not traced: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// traceReview starts the span of the API server's request for handler's
// binding bindingID and returns r with it in its context. It continues the
// trace of a W3C traceparent header, should the API server send one (it
// sends none today); else the span is the root of a trace of its own.
func (s *Server) traceReview(r *http.Request, handler, bindingID string) (*http.Request, trace.Span) {
	if s.opts.Tracer == nil {
		return r, noSpan
	}
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.opts.Tracer.Start(ctx, spanReview, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(tracing.AttrHandler.String(handler), tracing.AttrBinding.String(bindingID)))
	return r.WithContext(ctx), span
}

// traceRequest notes on the review's span what the request is about.
func traceRequest(ctx context.Context, req *admissionv1.AdmissionRequest) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrOperation.String(string(req.Operation)), attrUID.String(string(req.UID)),
			tracing.AttrNamespace.String(req.Namespace), tracing.AttrName.String(req.Name))
	}
}

// traceRefused ends the review's story with the status the request was
// refused with, before the handler was asked.
func traceRefused(ctx context.Context, code int, msg string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrStatus.Int(code))
		span.SetStatus(codes.Error, msg)
	}
}

// traceAnswer starts the span of the answer to the API server.
func traceAnswer(ctx context.Context) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noSpan
	}
	return parent.TracerProvider().Tracer(tracing.ScopeName).Start(ctx, spanAnswer)
}

// traceFailed notes on the answer's span that the handler failed, why, and
// the failure policy that answered instead.
func traceFailed(ctx context.Context, policy, reason, why string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrPolicy.String(policy), attrReason.String(reason))
		span.SetStatus(codes.Error, why)
	}
}
