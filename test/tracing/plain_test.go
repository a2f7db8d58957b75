package tracing

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/hold"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// plainHandler is a hand-written handler that lists its capabilities but
// not CAPABILITY_TRACE_CONTEXT, and sends no spans of its own.
var plainHandler = handler{name: "plainhandler"}

// TestAHandlerWithoutTheCapabilityIsServedAsBefore: a handler that does
// not list CAPABILITY_TRACE_CONTEXT, connected to a broker that exports
// its spans to Jaeger, gets its delivery without a trace_context (it was
// not offered one), acks it, and the broker adds its hold; the broker's
// own spans of that pass (the watch event, the wait, the delivery and its
// ack, the write) still arrive in Jaeger as one trace, with no span of
// another service in it. The handler speaks the protocol over a raw gRPC
// stream, so that nothing but its Hello decides what it is offered.
func TestAHandlerWithoutTheCapabilityIsServedAsBefore(t *testing.T) {
	e := startTraced(t)
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// The broker process may not listen yet: wait for it, as the SDKs do.
	stream, err := tetherv1.NewBrokerServiceClient(conn).Connect(ctx, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("opening the stream: %v", err)
	}
	widgets := &tetherv1.Resource{Group: widgetGVR.Group, Version: widgetGVR.Version, Resource: widgetGVR.Resource}
	hello := &tetherv1.Hello{Handler: plainHandler.name, InstanceId: "i1", Sdk: "test/plain",
		Capabilities: []tetherv1.Capability{tetherv1.Capability_CAPABILITY_CAPABILITIES},
		// The delete binding makes the broker hold the widgets it sees.
		Bindings: []*tetherv1.Binding{
			{Id: "create", Kind: tetherv1.BindingKind_BINDING_KIND_CREATE, Namespaces: []string{e.ns}, Resource: widgets},
			{Id: "delete", Kind: tetherv1.BindingKind_BINDING_KIND_DELETE, Namespaces: []string{e.ns}, Resource: widgets},
		}}
	if err := stream.Send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		t.Fatalf("sending the Hello: %v", err)
	}
	if msg, err := stream.Recv(); err != nil || msg.GetWelcome() == nil {
		t.Fatalf("the broker's answer to the Hello: %v, %v; want a Welcome", msg, err)
	}

	create(t, e.dyn, e.ns, "w1")
	d := nextDelivery(t, stream)
	if d.GetRef().GetName() != "w1" || d.GetBindingId() != "create" {
		t.Fatalf("delivery of binding %q for %q, want the create of w1", d.GetBindingId(), d.GetRef().GetName())
	}
	if tc := d.GetTraceContext(); len(tc) != 0 {
		t.Errorf("the delivery carries trace_context %v to a handler that did not list CAPABILITY_TRACE_CONTEXT", tc)
	}
	if err := stream.Send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Ack{Ack: &tetherv1.Ack{
		DeliveryId: d.GetId(), Outcome: tetherv1.Outcome_OUTCOME_OK}}}); err != nil {
		t.Fatalf("acking the delivery: %v", err)
	}
	waitObject(t, e.dyn, e.ns, "w1", "held", func(o *unstructured.Unstructured) bool { return o != nil && hold.Has(o, plainHandler.name) })
	created := waitTrace(t, e.jaeger, plainHandler, "create", "w1", "ADDED", "tether.hold.add")
	logTree(t, "the trace of the create", created)
}

// nextDelivery returns the next delivery on stream, past the broker's
// other messages.
func nextDelivery(t *testing.T, stream tetherv1.BrokerService_ConnectClient) *tetherv1.Delivery {
	t.Helper()
	for {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatalf("waiting for a delivery: %v", err)
		}
		if d := msg.GetDelivery(); d != nil {
			return d
		}
	}
}
