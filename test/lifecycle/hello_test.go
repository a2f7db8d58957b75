package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tether-dev/tether/broker"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestBadHelloIsRefusedWithTheField sends malformed Hellos over a raw gRPC
// stream: each ends with InvalidArgument (or Unimplemented) naming the
// binding and the field, and a good handler connected meanwhile is not
// disturbed.
func TestBadHelloIsRefusedWithTheField(t *testing.T) {
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	addr := startBroker(t, cp)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := tetherv1.NewBrokerServiceClient(conn)

	secrets := &tetherv1.Resource{Version: "v1", Resource: "secrets"}
	good := func(mut func(b *tetherv1.Binding)) []*tetherv1.Binding {
		b := &tetherv1.Binding{Id: "b0", Kind: tetherv1.BindingKind_BINDING_KIND_CREATE, Resource: secrets}
		if mut != nil {
			mut(b)
		}
		return []*tetherv1.Binding{b}
	}
	cases := []struct {
		name     string
		hello    *tetherv1.Hello
		code     codes.Code
		contains []string
	}{
		{"bad handler name", &tetherv1.Hello{Handler: "Bad_Name", InstanceId: "i", Bindings: good(nil)}, codes.InvalidArgument, []string{"handler"}},
		{"unknown resource", &tetherv1.Hello{Handler: "h", InstanceId: "i", Bindings: good(func(b *tetherv1.Binding) {
			b.Resource = &tetherv1.Resource{Version: "v1", Resource: "nosuchthings"}
		})}, codes.InvalidArgument, []string{"bindings[0]", "resource", "nosuchthings"}},
		{"bad label selector", &tetherv1.Hello{Handler: "h", InstanceId: "i", Bindings: good(func(b *tetherv1.Binding) {
			b.LabelSelector = "a=(b"
		})}, codes.InvalidArgument, []string{"bindings[0]", "label_selector"}},
		{"CEL that does not compile", &tetherv1.Hello{Handler: "h", InstanceId: "i", Bindings: good(func(b *tetherv1.Binding) {
			b.When = "object.metadata.name =="
		})}, codes.InvalidArgument, []string{`bindings[0] ("b0")`, "when"}},
		{"unsupported kind", &tetherv1.Hello{Handler: "h", InstanceId: "i", Bindings: good(func(b *tetherv1.Binding) {
			b.Kind = tetherv1.BindingKind_BINDING_KIND_MUTATE
		})}, codes.Unimplemented, []string{"bindings[0]", "kind"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := sayHello(t, client, c.hello)
			if st.Code() != c.code {
				t.Fatalf("code = %v (%s), want %v", st.Code(), st.Message(), c.code)
			}
			for _, s := range c.contains {
				if !strings.Contains(st.Message(), s) {
					t.Errorf("message %q does not name %q", st.Message(), s)
				}
			}
		})
	}
}

// TestHelloDuringAnAPIOutageIsToldToRetry: a broker that cannot reach the
// API server to look up a binding's resource answers the Hello with
// Unavailable, which the SDKs retry, and not with InvalidArgument, a
// verdict on the handler that they give up on. make chaos found it: a reset
// of the broker's connections to the API server made the Python instance
// of the chaos handler exit with "broker rejected handler".
func TestHelloDuringAnAPIOutageIsToldToRetry(t *testing.T) {
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	proxy, _ := apiProxy(t, cp)
	addr := startBroker(t, cp, func(o *broker.Options) { o.Config.Host = "https://" + proxy.Listen })
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := tetherv1.NewBrokerServiceClient(conn)
	hello := &tetherv1.Hello{Handler: "outage", InstanceId: "i", Bindings: []*tetherv1.Binding{{
		Id: "b0", Kind: tetherv1.BindingKind_BINDING_KIND_CREATE,
		Resource: &tetherv1.Resource{Group: widgets.Group, Version: widgets.Version, Resource: widgets.Resource},
	}}}

	proxy.Stop()
	if st := sayHello(t, client, hello); st.Code() != codes.Unavailable {
		t.Errorf("with the API server out of reach: code = %v (%s), want Unavailable", st.Code(), st.Message())
	}
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	if st := sayHello(t, client, hello); st.Code() != codes.OK {
		t.Errorf("with the API server back: code = %v (%s), want a welcome", st.Code(), st.Message())
	}
}

// sayHello sends hello on a new stream and returns how the broker answered
// it: OK for a welcome, else the status that ended the stream.
func sayHello(t *testing.T, client tetherv1.BrokerServiceClient, hello *tetherv1.Hello) *status.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := openSession(ctx, t, client, hello).Recv()
	if err == nil && resp.GetWelcome() == nil {
		t.Fatalf("the broker's first message is %v, not a welcome", resp)
	}
	return status.Convert(err)
}

// TestHostileStreamsDoNotDisturbOtherHandlers opens a stream that never
// says Hello, one that sends a message over the size limit, and one that
// acks a delivery it never got. Each is refused (or shrugged off) on its
// own, while a well-behaved handler keeps being served.
func TestHostileStreamsDoNotDisturbOtherHandlers(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, func(o *broker.Options) {
		o.HelloTimeout = 500 * time.Millisecond
		o.MaxMessageSize = 64 << 10
	})
	var j journal
	h := sdk.New("good", handlerOpts(t)...)
	h.OnCreate(widgets, j.record(nil), sdk.Namespaces(ns))
	runHandler(t, h, addr)

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := tetherv1.NewBrokerServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	silent, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := silent.Recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a stream without Hello ended with %v, want DeadlineExceeded", err)
	}

	huge, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = huge.Send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Hello{Hello: &tetherv1.Hello{
		Handler: "huge", InstanceId: strings.Repeat("x", 128<<10)}}})
	if _, err := huge.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("an oversized message ended with %v, want ResourceExhausted", err)
	}

	stray, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hello := &tetherv1.Hello{Handler: "stray", InstanceId: "i", Bindings: []*tetherv1.Binding{{
		Id: "c", Kind: tetherv1.BindingKind_BINDING_KIND_CREATE, Namespaces: []string{ns},
		Resource: &tetherv1.Resource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"},
	}}}
	if err := stray.Send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	if msg, err := stray.Recv(); err != nil || msg.GetWelcome() == nil {
		t.Fatalf("stray handler: want Welcome, got %v, %v", msg, err)
	}
	if err := stray.Send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Ack{Ack: &tetherv1.Ack{
		DeliveryId: "never-sent", Outcome: tetherv1.Outcome_OUTCOME_OK}}}); err != nil {
		t.Fatal(err)
	}

	create(t, dyn, widgetGVR, widget(ns, "after", map[string]any{"size": int64(1)}))
	j.waitCount(t, sdk.Create, "after", 1)
	msg, err := stray.Recv()
	if err != nil || msg.GetDelivery().GetRef().GetName() != "after" {
		t.Fatalf("the stream that sent a stray ack is not served any more: %v, %v", msg, err)
	}
}

// openSession opens a stream under ctx and sends hello on it, as a
// hand-written handler would.
func openSession(ctx context.Context, t *testing.T, client tetherv1.BrokerServiceClient, hello *tetherv1.Hello) tetherv1.BrokerService_ConnectClient {
	t.Helper()
	stream, err := client.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	return stream
}
