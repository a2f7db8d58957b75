package dispatch

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/session"
	"github.com/tether-dev/tether/broker/tracing"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// The names of the broker's spans (docs/observability.md, "Traces"). A
// pass over one object that delivers or writes is one trace: its root is
// spanPass, and spanWatch and spanQueue are its first children when a
// watch event queued it.
const (
	spanPass    = "tether.pass"
	spanWatch   = "tether.watch_event"
	spanQueue   = "tether.queue"
	spanDeliver = "tether.deliver"
	spanAck     = "tether.ack"
	spanWrite   = "tether.write"
)

// The attributes of the broker's spans; the SDKs name the handler and the
// binding the same way on theirs.
const (
	attrDelivery   = attribute.Key("tether.delivery.id")
	attrKind       = attribute.Key("tether.delivery.kind")
	attrAttempt    = attribute.Key("tether.delivery.attempt")
	attrInstance   = attribute.Key("tether.instance")
	attrOutcome    = attribute.Key("tether.ack.outcome")
	attrEventType  = attribute.Key("k8s.watch.event_type")
	attrUID        = attribute.Key("k8s.object.uid")
	attrResource   = attribute.Key("k8s.object.resource")
	attrVersion    = attribute.Key("k8s.object.resource_version")
	attrAddHold    = attribute.Key("tether.hold.add")
	attrRelease    = attribute.Key("tether.hold.release")
	attrWriteWaits = attribute.Key("tether.write.waits")
)

// watchSeen is when the first watch event since an object's last pass
// arrived, and its type: the start of the trace of the pass it queues.
// The controller keeps them beside the objects, only while it traces, so
// that an object costs nothing more when it does not.
type watchSeen struct {
	at  time.Time
	typ string
}

// passTrace is the trace of one pass over one object. Its root span is
// made when the pass first delivers or writes, so that a pass with nothing
// to do sends no trace.
type passTrace struct {
	tracer  trace.Tracer
	handler string
	o       *object
	seen    watchSeen // zero: no watch event queued the pass (a tick, a retry)
	began   time.Time
	root    trace.Span // nil until the pass delivers or writes
}

type passTraceKey struct{}

// noSpan is the span of what is not traced: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// tracePass starts the trace of a pass over o, which seen queued (zero:
// no watch event did), into ctx; ctx is returned as is when the handler
// does not trace.
func (h *handler) tracePass(ctx context.Context, o *object, seen watchSeen) context.Context {
	if h.tracer == nil {
		return ctx
	}
	// Wall clock, not the injected one: spans are read beside the
	// handler's, which know no other.
	pt := &passTrace{tracer: h.tracer, handler: h.name, o: o, seen: seen, began: time.Now()}
	return context.WithValue(ctx, passTraceKey{}, pt)
}

// endPassTrace ends the root span of the pass traced in ctx, if it was made.
func endPassTrace(ctx context.Context) {
	if pt, _ := ctx.Value(passTraceKey{}).(*passTrace); pt != nil && pt.root != nil {
		pt.root.End()
	}
}

// takeSeen returns and forgets the watch event that queued uid's pass.
// h.mu must be held.
func (h *handler) takeSeen(uid types.UID) watchSeen {
	if h.seen == nil {
		return watchSeen{}
	}
	s := h.seen[uid]
	delete(h.seen, uid)
	return s
}

// noteSeen records the arrival of a watch event of typ for uid, unless one
// since its last pass is recorded. h.mu must be held.
func (h *handler) noteSeen(uid types.UID, typ string) {
	if h.seen == nil {
		return
	}
	if _, ok := h.seen[uid]; !ok {
		h.seen[uid] = watchSeen{at: time.Now(), typ: typ}
	}
}

// startSpan starts the span name in the trace of the pass in ctx, as a
// child of the span ctx carries, or of the pass's root, which it makes
// first. Outside a pass (an admission review) it is a child of the span ctx
// carries, made by that span's provider; without either the span does
// nothing.
func startSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	pt, _ := ctx.Value(passTraceKey{}).(*passTrace)
	if pt == nil {
		parent := trace.SpanFromContext(ctx)
		if !parent.IsRecording() {
			return ctx, noSpan
		}
		return parent.TracerProvider().Tracer(tracing.ScopeName).Start(ctx, name, trace.WithAttributes(attrs...))
	}
	if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		ctx = trace.ContextWithSpan(ctx, pt.rootSpan(ctx))
	}
	return pt.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// rootSpan makes the root span of the pass, with the spans of the watch
// event and of the wait in the queue, when it is not made yet.
func (pt *passTrace) rootSpan(ctx context.Context) trace.Span {
	if pt.root != nil {
		return pt.root
	}
	start := pt.began
	if !pt.seen.at.IsZero() {
		start = pt.seen.at
	}
	o := pt.o
	attrs := []attribute.KeyValue{tracing.AttrHandler.String(pt.handler), attrUID.String(string(o.uid)), attrResource.String(o.res.Resource)}
	if o.cur != nil {
		attrs = append(attrs, tracing.AttrNamespace.String(o.cur.Namespace), tracing.AttrName.String(o.cur.Name), attrVersion.String(o.cur.ResourceVersion))
	}
	var rootCtx context.Context
	rootCtx, pt.root = pt.tracer.Start(ctx, spanPass,
		trace.WithNewRoot(), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if !pt.seen.at.IsZero() {
		_, w := pt.tracer.Start(rootCtx, spanWatch, trace.WithTimestamp(pt.seen.at), trace.WithAttributes(attrEventType.String(pt.seen.typ)))
		w.End(trace.WithTimestamp(pt.seen.at))
		_, q := pt.tracer.Start(rootCtx, spanQueue, trace.WithTimestamp(pt.seen.at))
		q.End(trace.WithTimestamp(pt.began))
	}
	return pt.root
}

// traceLog is log with the id of the trace ctx is in, so that a line
// about a delivery finds its trace: that of the span ctx carries, else of
// its pass's root span, if made; log as is without either.
func traceLog(ctx context.Context, log hclog.Logger) hclog.Logger {
	if pt, _ := ctx.Value(passTraceKey{}).(*passTrace); pt != nil && pt.root != nil && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpan(ctx, pt.root)
	}
	return tracing.Logger(ctx, log)
}

// traceDelivery starts the span of one attempt to deliver d for b to in,
// and puts its trace context in d when in continues traces.
func (dl *deliverer) traceDelivery(ctx context.Context, in *session.Instance, d *tetherv1.Delivery) (context.Context, trace.Span) {
	if dl.tracer == nil {
		return ctx, noSpan // before the attributes are made: off costs nothing
	}
	d.TraceContext = nil
	ctx, span := startSpan(ctx, spanDeliver, tracing.AttrHandler.String(dl.name), tracing.AttrBinding.String(d.BindingId),
		attrDelivery.String(d.Id), attrKind.String(kindLabel(d.GetKind())), attrAttempt.Int(int(d.Attempt)), attrInstance.String(in.ID))
	if span.SpanContext().IsSampled() && in.Capabilities.Has(tetherv1.Capability_CAPABILITY_TRACE_CONTEXT) {
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		d.TraceContext = carrier
	}
	return ctx, span
}

// traceAck ends the span of a delivery with how it was answered: the ack,
// as a span of its own, or the error that stood in for one.
func traceAck(ctx context.Context, span trace.Span, ack *tetherv1.Ack, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	if ack != nil {
		_, a := startSpan(ctx, spanAck, attrOutcome.String(ack.GetOutcome().String()))
		if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
			a.SetStatus(codes.Error, ack.GetMessage())
		}
		a.End()
	}
}

// traceWrite starts the span of the write w.
func (h *handler) traceWrite(ctx context.Context, w *write) (context.Context, trace.Span) {
	if h.tracer == nil {
		return ctx, noSpan
	}
	return startSpan(ctx, spanWrite, attrAddHold.Bool(w.addHold), attrRelease.Bool(w.removeHold))
}

// traceWritten ends the span of a write: it waits for its turn (a later
// pass makes it), or it landed, or err says why not.
func traceWritten(span trace.Span, wait time.Duration, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if wait > 0 {
		span.SetAttributes(attrWriteWaits.String(wait.String()))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}
