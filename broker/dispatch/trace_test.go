package dispatch

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/session"
	"github.com/tether-dev/tether/broker/tracing"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// tracedPass is a pass test whose handler traces into an in-memory
// recorder, and delivers through the real deliverer to instance in, which
// answers OK and keeps the trace context of each delivery.
type tracedPass struct {
	*passTest
	spans *tracetest.SpanRecorder
	sent  []map[string]string
}

func newTracedPass(t *testing.T, caps session.Capabilities, bs ...*binding.Binding) *tracedPass {
	p := &tracedPass{passTest: newPassTest(t, bs...), spans: tracetest.NewSpanRecorder()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	p.h.tracer, p.h.seen = tp.Tracer("test"), map[types.UID]watchSeen{}
	in := &session.Instance{Handler: "h", ID: "traced", Capabilities: caps}
	p.h.pool.remove(instanceA)
	p.h.pool.add(in)
	p.r.deliver = &deliverer{handler: p.h, send: func(_ *session.Instance, _ context.Context, d *tetherv1.Delivery, _ <-chan struct{}, _ <-chan time.Time) (*tetherv1.Ack, error) {
		p.sent = append(p.sent, d.GetTraceContext())
		return &tetherv1.Ack{DeliveryId: d.GetId(), Outcome: tetherv1.Outcome_OUTCOME_OK}, nil
	}}
	return p
}

// created has the informer see a new widget, as observe does, and runs a
// pass over it.
func (p *tracedPass) created() {
	o := p.see(sized("1", 1, "red"), watchAdded, false)
	p.h.mu.Lock()
	p.h.noteSeen(o.uid, watchAdded)
	p.h.mu.Unlock()
	if res := p.r.reconcile(context.Background(), o.uid); res.stops() {
		p.t.Fatalf("the pass stopped: %+v", res)
	}
}

// tree is each ended span as "parent > name", the root's parent "-".
func (p *tracedPass) tree() map[string]sdktrace.ReadOnlySpan {
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range p.spans.Ended() {
		byID[s.SpanContext().SpanID().String()] = s
	}
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range p.spans.Ended() {
		parent := "-"
		if ps, ok := byID[s.Parent().SpanID().String()]; ok {
			parent = ps.Name()
		}
		out[parent+" > "+s.Name()] = s
	}
	return out
}

// A pass over a created object is one trace: the watch event, the wait in
// the queue, the delivery with its ack, and the write that adds the hold,
// under the pass; the delivery carries the delivery span's context to an
// instance that lists CAPABILITY_TRACE_CONTEXT.
func TestAPassIsOneTraceCarriedInTheDelivery(t *testing.T) {
	p := newTracedPass(t, session.Capabilities{tetherv1.Capability_CAPABILITY_CAPABILITIES, tetherv1.Capability_CAPABILITY_TRACE_CONTEXT},
		bind("c", binding.Create, binding.PolicyHold))
	p.created()
	tree := p.tree()
	for _, want := range []string{"- > " + spanPass, spanPass + " > " + spanWatch, spanPass + " > " + spanQueue,
		spanPass + " > " + spanDeliver, spanDeliver + " > " + spanAck, spanPass + " > " + spanWrite} {
		if tree[want] == nil {
			t.Errorf("no span %q in %v", want, keys(tree))
		}
	}
	if len(tree) != 6 {
		t.Errorf("spans %v, want 6", keys(tree))
	}
	del := tree[spanPass+" > "+spanDeliver]
	if del == nil {
		t.FailNow()
	}
	if !has(del.Attributes(), tracing.AttrBinding.String("c")) || !has(del.Attributes(), tracing.AttrHandler.String("h")) {
		t.Errorf("the delivery span has %v, want the handler and the binding", del.Attributes())
	}
	if w := tree[spanPass+" > "+spanWrite]; w == nil || !has(w.Attributes(), attrAddHold.Bool(true)) {
		t.Errorf("the write span does not add the hold")
	}
	sc := del.SpanContext()
	want := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
	if len(p.sent) != 1 || p.sent[0]["traceparent"] != want {
		t.Errorf("the delivery carried %v, want traceparent %s", p.sent, want)
	}
}

// An instance that does not list CAPABILITY_TRACE_CONTEXT is sent no trace
// context; the broker's own spans are made all the same.
func TestNoTraceContextWithoutTheCapability(t *testing.T) {
	p := newTracedPass(t, session.Capabilities{tetherv1.Capability_CAPABILITY_CAPABILITIES}, bind("c", binding.Create, binding.PolicyHold))
	p.created()
	if len(p.sent) != 1 || len(p.sent[0]) != 0 {
		t.Errorf("the delivery carried %v, want no trace context", p.sent)
	}
	if tree := p.tree(); tree[spanPass+" > "+spanDeliver] == nil {
		t.Errorf("no delivery span in %v", keys(tree))
	}
}

// A pass that delivers and writes nothing sends no trace.
func TestAPassWithNothingToDoSendsNoTrace(t *testing.T) {
	p := newTracedPass(t, nil, bind("c", binding.Create, binding.PolicyHold))
	p.created()
	before := len(p.spans.Ended())
	if before == 0 {
		t.Fatal("the first pass sent no trace")
	}
	p.created() // the same state again: nothing to do
	if n := len(p.spans.Ended()); n != before {
		t.Errorf("%d spans from a pass with nothing to do", n-before)
	}
}

func keys(m map[string]sdktrace.ReadOnlySpan) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func has(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, a := range attrs {
		if a == want {
			return true
		}
	}
	return false
}

// A handler that does not trace spends no allocation on the spans of a
// delivery or a write.
func TestTracingOffAllocatesNothing(t *testing.T) {
	p := newPassTest(t, bind("c", binding.Create, binding.PolicyHold))
	dl := &deliverer{handler: p.h}
	d := &tetherv1.Delivery{Id: "d", BindingId: "c"}
	w := &write{addHold: true}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, span := dl.traceDelivery(ctx, instanceA, d)
		traceAck(c, span, &tetherv1.Ack{}, nil)
		_, span = p.h.traceWrite(ctx, w)
		traceWritten(span, 0, nil)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per delivery and write with tracing off, want 0", allocs)
	}
}

// The broker's line about a delivery names the trace of its pass: here the
// re-send after an instance left before it acked.
func TestTheLinesAboutADeliveryNameItsTrace(t *testing.T) {
	p := newTracedPass(t, nil, bind("c", binding.Create, binding.PolicyHold))
	var logs bytes.Buffer
	p.h.log = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
	left := false
	send := p.r.deliver.(*deliverer).send
	p.r.deliver.(*deliverer).send = func(in *session.Instance, ctx context.Context, d *tetherv1.Delivery, abort <-chan struct{}, expired <-chan time.Time) (*tetherv1.Ack, error) {
		if !left {
			left = true
			return nil, session.ErrGone
		}
		return send(in, ctx, d, abort, expired)
	}
	p.created()
	root := p.tree()["- > "+spanPass]
	if root == nil {
		t.Fatalf("no pass span in %v", keys(p.tree()))
	}
	want := "trace_id=" + root.SpanContext().TraceID().String()
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "instance left before acking") {
			if !strings.Contains(l, want) {
				t.Errorf("the line %q does not have %s", l, want)
			}
			return
		}
	}
	t.Errorf("no line about the re-send in %q", logs.String())
}
