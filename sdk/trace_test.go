package sdk_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// The function of a delivery that carries the broker's trace context runs
// in a span that is a child of the broker's delivery span, its ctx carries
// it, and the delivery's log lines name the trace; a delivery without one
// makes no span.
func TestTheFunctionContinuesTheBrokersTrace(t *testing.T) {
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	hs := newHarness(t, &fakeBroker{})
	h := sdk.New("secret-ttl", hs.options(sdk.WithTracerProvider(tp))...)
	seen := make(chan trace.SpanContext, 2)
	h.OnCreate(configMaps, func(ctx context.Context, _ *sdk.Event) error {
		seen <- trace.SpanContextFromContext(ctx)
		return nil
	})
	hs.run(h)
	s := hs.session()
	if !slices.Contains(s.hello.GetCapabilities(), tetherv1.Capability_CAPABILITY_TRACE_CONTEXT) {
		t.Errorf("Hello.capabilities = %v, without CAPABILITY_TRACE_CONTEXT", s.hello.GetCapabilities())
	}

	s.deliver(t, delivery("d1", func(d *tetherv1.Delivery) {
		d.TraceContext = map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"}
	}))
	if a := s.ack(t); a.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
		t.Fatalf("ack %v", a)
	}
	in := recv(t, seen, "the function's span")
	if in.TraceID().String() != traceID {
		t.Errorf("the function ran in trace %s, want %s", in.TraceID(), traceID)
	}
	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	sp := ended[0]
	if sp.Name() != "tether.handle" || sp.Parent().SpanID().String() != parentID || sp.SpanContext().SpanID() != in.SpanID() {
		t.Errorf("span %q with parent %s, want tether.handle under %s, the function's", sp.Name(), sp.Parent().SpanID(), parentID)
	}
	hs.logs.waitFor(t, "trace_id="+traceID)

	s.deliver(t, delivery("d2"))
	s.ack(t)
	if in := recv(t, seen, "the function's span"); in.IsValid() {
		t.Errorf("a delivery without trace context ran in span %v", in)
	}
	if n := len(spans.Ended()); n != 1 {
		t.Errorf("%d spans after a delivery without trace context, want 1", n)
	}
	for _, l := range strings.Split(hs.logs.String(), "\n") {
		if strings.Contains(l, "delivery=d2") && strings.Contains(l, "trace_id") {
			t.Errorf("a delivery without trace context logged a trace id: %s", l)
		}
	}
}

// The function's span names the delivery kind as the broker's delivery
// span does (tether.delivery.kind "event" for a watch event, as in the
// Python and TypeScript SDKs), with the other attributes of the delivery.
func TestTheFunctionsSpanNamesTheDeliveryAsTheBrokerDoes(t *testing.T) {
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	hs := newHarness(t, &fakeBroker{})
	h := sdk.New("secret-ttl", hs.options(sdk.WithTracerProvider(tp))...)
	h.OnEvent(configMaps, func(context.Context, *sdk.Event) error { return nil }, sdk.ID("watch"))
	hs.run(h)
	s := hs.session()
	s.deliver(t, delivery("d1", func(d *tetherv1.Delivery) {
		d.BindingId, d.Kind, d.Attempt, d.EventType = "watch", tetherv1.DeliveryKind_DELIVERY_KIND_EVENT, 2, "MODIFIED"
		d.TraceContext = map[string]string{"traceparent": traceparent}
	}))
	if a := s.ack(t); a.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
		t.Fatalf("ack %v", a)
	}
	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	got := map[string]string{}
	for _, kv := range ended[0].Attributes() {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	want := map[string]string{"tether.handler": "secret-ttl", "tether.binding.id": "watch", "tether.delivery.id": "d1",
		"tether.delivery.kind": "event", "tether.delivery.attempt": "2", "tether.ack.outcome": "OUTCOME_OK"}
	if !maps.Equal(got, want) {
		t.Errorf("span attributes %v, want %v", got, want)
	}
}

// traceparentOf is a sampled traceparent of trace traceID and span parent.
func traceparentOf(traceID, parent string) map[string]string {
	return map[string]string{"traceparent": "00-" + traceID + "-" + parent + "-01"}
}

// endedUnder returns the ended span whose parent is parent; it fails the
// test without one.
func endedUnder(t *testing.T, spans *tracetest.SpanRecorder, parent string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans.Ended() {
		if s.Parent().SpanID().String() == parent {
			return s
		}
	}
	t.Fatalf("no span ended under %s of %d", parent, len(spans.Ended()))
	return nil
}

func attrsOf(s sdktrace.ReadOnlySpan) map[string]string {
	got := map[string]string{}
	for _, kv := range s.Attributes() {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	return got
}

// A review's function runs in a span under the broker's delivery span, as
// a lifecycle function does, and its ctx carries it.
func TestTheAdmissionFunctionContinuesTheBrokersTrace(t *testing.T) {
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	hs := newHarness(t, nil)
	h := sdk.New("secret-policy", hs.options(sdk.WithTracerProvider(tp))...)
	seen := make(chan trace.SpanContext, 1)
	h.OnValidate(secrets, func(ctx context.Context, _ *sdk.Review) error {
		seen <- trace.SpanContextFromContext(ctx)
		return nil
	})
	hs.run(h)
	s := hs.session()
	s.deliver(t, review("r1", func(d *tetherv1.Delivery) { d.TraceContext = traceparentOf(traceID, parentID) }))
	if a := s.ack(t); a.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
		t.Fatalf("ack %v", a)
	}
	in := recv(t, seen, "the function's span")
	sp := endedUnder(t, spans, parentID)
	if sp.Name() != "tether.handle" || sp.SpanContext().SpanID() != in.SpanID() || in.TraceID().String() != traceID {
		t.Errorf("span %q (%s) in trace %s, want tether.handle, the function's (%s) in %s", sp.Name(), sp.SpanContext().SpanID(),
			in.TraceID(), in.SpanID(), traceID)
	}
	if a := attrsOf(sp); a["tether.delivery.kind"] != "admission" || a["tether.ack.outcome"] != "OUTCOME_OK" {
		t.Errorf("span attributes %v, want kind admission and outcome OK", a)
	}
}

// A daemon runs in a span under the broker's span of its start, ended
// when the function returns; its stop is a span under the broker's span
// of the stop, from the stop to the function's return.
func TestADaemonRunsInTheTraceOfItsStart(t *testing.T) {
	const startTrace, startParent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const stopTrace, stopParent = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	p := newDaemonProbe(nil)
	defer p.open()
	_, s, _ := startDaemonHandler(t, p, sdk.WithTracerProvider(tp))

	s.deliver(t, daemonDelivery(tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START, "s1", "uid-a", func(d *tetherv1.Delivery) {
		d.TraceContext = traceparentOf(startTrace, startParent)
	}))
	wantAck(t, s, "s1", tetherv1.Outcome_OUTCOME_OK)
	run := recv(t, p.started, "the daemon to start")
	if run.span.TraceID().String() != startTrace {
		t.Errorf("the daemon runs in trace %s, want its start's %s", run.span.TraceID(), startTrace)
	}
	s.deliver(t, daemonDelivery(tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_STOP, "x1", "uid-a", func(d *tetherv1.Delivery) {
		d.TraceContext = traceparentOf(stopTrace, stopParent)
	}))
	recv(t, p.causes, "the daemon to be stopped")
	p.open()
	wantAck(t, s, "x1", tetherv1.Outcome_OUTCOME_OK)

	started := endedUnder(t, spans, startParent)
	if started.Name() != "tether.handle" || started.SpanContext().SpanID() != run.span.SpanID() || attrsOf(started)["tether.delivery.kind"] != "daemon-start" {
		t.Errorf("the daemon's span: %q %v, want tether.handle of a daemon-start, the function's", started.Name(), attrsOf(started))
	}
	stopped := endedUnder(t, spans, stopParent)
	if stopped.Name() != "tether.handle" || attrsOf(stopped)["tether.delivery.kind"] != "daemon-stop" || stopped.EndTime().Before(started.EndTime()) {
		t.Errorf("the stop's span: %q %v ending %v, want tether.handle of a daemon-stop ending after the daemon's (%v)",
			stopped.Name(), attrsOf(stopped), stopped.EndTime(), started.EndTime())
	}
}

// A daemon's log lines name the trace of its start, as a delivery's do.
func TestADaemonsLogLinesNameTheTraceOfItsStart(t *testing.T) {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	p := newDaemonProbe(nil)
	defer p.open()
	hs, s, _ := startDaemonHandler(t, p)
	s.deliver(t, daemonDelivery(tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START, "s1", "uid-a", func(d *tetherv1.Delivery) {
		d.TraceContext = traceparentOf(traceID, "00f067aa0ba902b7")
	}))
	wantAck(t, s, "s1", tetherv1.Outcome_OUTCOME_OK)
	recv(t, p.started, "the daemon to start")
	for _, l := range strings.Split(hs.logs.String(), "\n") {
		if strings.Contains(l, "daemon started") && !strings.Contains(l, "trace_id="+traceID) {
			t.Errorf("the daemon's line does not name its trace: %s", l)
		}
	}
	hs.logs.waitFor(t, "trace_id="+traceID)
}
