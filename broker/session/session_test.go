package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/resource"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wait bounds every wait in these tests; nothing waits this long when the
// code under test works.
const wait = 10 * time.Second

var (
	secrets    = resource.Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Kind: "Secret", Namespaced: true}
	namespaces = resource.Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, Kind: "Namespace"}
	widgets    = resource.Resource{GroupVersionResource: schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}, Kind: "Widget", Namespaced: true}
)

type fakeResolver struct{}

func (fakeResolver) Resolve(_ context.Context, q resource.Query) (resource.Resource, error) {
	for _, r := range []resource.Resource{secrets, namespaces, widgets} {
		if q.Group == r.Group && (q.Resource == r.Resource || q.Resource == "" && q.Kind == r.Kind) {
			return r, nil
		}
	}
	return resource.Resource{}, fmt.Errorf("%s in %s/%s: %w", q.Resource, q.Group, q.Version, resource.ErrNotFound)
}

type attachment struct {
	in       *Instance
	bindings []*binding.Binding
}

// fakeAttacher records attached instances and counts detaches.
type fakeAttacher struct {
	err error
	// ended, when set, makes every attachment reviews-only, ended when it
	// closes (a follower coming to lead).
	ended    chan struct{}
	attached chan attachment
	detached chan string // session ids, as detach is called

	mu       sync.Mutex
	attaches int
	detaches map[string]int // by session id
}

func newAttacher() *fakeAttacher {
	return &fakeAttacher{attached: make(chan attachment, 16), detached: make(chan string, 16), detaches: map[string]int{}}
}

func (a *fakeAttacher) Attach(ctx context.Context, in *Instance, _ *tetherv1.Hello, bindings []*binding.Binding) (Attachment, error) {
	if ctx == nil {
		return Attachment{}, errors.New("no context")
	}
	if a.err != nil {
		return Attachment{}, a.err
	}
	a.mu.Lock()
	a.attaches++
	a.mu.Unlock()
	a.attached <- attachment{in, bindings}
	return Attachment{Detach: func() {
		a.mu.Lock()
		a.detaches[in.SessionID]++
		a.mu.Unlock()
		a.detached <- in.SessionID
	}, ReviewsOnly: a.ended != nil, Ended: a.ended}, nil
}

func (a *fakeAttacher) counts() (attaches int, detaches map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d := map[string]int{}
	for k, v := range a.detaches {
		d[k] = v
	}
	return a.attaches, d
}

type harness struct {
	attacher *fakeAttacher
	client   tetherv1.BrokerServiceClient
}

// start serves a session Server over bufconn. Cleanup stops everything,
// checks that every attach was detached exactly once and that no goroutine
// is left behind.
func start(t *testing.T, opts Options) *harness {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) }) // runs last

	h := &harness{attacher: newAttacher()}
	if opts.Attacher == nil {
		opts.Attacher = h.attacher
	}
	if opts.Resolver == nil {
		opts.Resolver = fakeResolver{}
	}
	lis := bufconn.Listen(1 << 20)
	// WaitForHandlers makes Stop return only once every Connect returned.
	srv := grpc.NewServer(grpc.WaitForHandlers(true), grpc.StreamInterceptor(asTestUser))
	tetherv1.RegisterBrokerServiceServer(srv, NewServer(opts))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()

	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dialing: %v", err)
	}
	h.client = tetherv1.NewBrokerServiceClient(conn)
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		attaches, detaches := h.attacher.counts()
		total := 0
		for id, n := range detaches {
			if n != 1 {
				t.Errorf("session %s detached %d times", id, n)
			}
			total += n
		}
		if total != attaches {
			t.Errorf("%d attaches, %d detaches", attaches, total)
		}
	})
	return h
}

// instance waits for the Attacher to receive the next instance.
func (h *harness) instance(t *testing.T) attachment {
	t.Helper()
	select {
	case a := <-h.attacher.attached:
		return a
	case <-time.After(wait):
		t.Fatal("no instance was attached")
		return attachment{}
	}
}

// client is one handler instance's end of a Connect stream. A pump
// goroutine reads the stream, so every read can have a deadline.
type client struct {
	t      *testing.T
	stream tetherv1.BrokerService_ConnectClient
	cancel context.CancelFunc
	msgs   chan *tetherv1.ConnectResponse
	ended  chan struct{} // closed when Recv failed; err is then set
	err    error
}

func (h *harness) connect(t *testing.T) *client {
	t.Helper()
	return h.connectCtx(t, context.Background())
}

// connectCtx opens a stream under parent (which carries its metadata).
func (h *harness) connectCtx(t *testing.T, parent context.Context) *client {
	t.Helper()
	ctx, cancel := context.WithCancel(parent)
	stream, err := h.client.Connect(ctx)
	if err != nil {
		cancel()
		t.Fatalf("Connect: %v", err)
	}
	c := &client{t: t, stream: stream, cancel: cancel, msgs: make(chan *tetherv1.ConnectResponse, 64), ended: make(chan struct{})}
	go func() {
		defer close(c.ended)
		for {
			msg, err := stream.Recv()
			if err != nil {
				c.err = err
				return
			}
			select {
			case c.msgs <- msg:
			case <-ctx.Done():
				c.err = ctx.Err()
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-c.ended
	})
	return c
}

func (c *client) send(req *tetherv1.ConnectRequest) {
	c.t.Helper()
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("Send(%v): %v", req, err)
	}
}

func (c *client) ack(id string, outcome tetherv1.Outcome) *tetherv1.Ack {
	c.t.Helper()
	a := &tetherv1.Ack{DeliveryId: id, Outcome: outcome, Message: "acked " + id}
	c.send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Ack{Ack: a}})
	return a
}

func (c *client) goodbye() {
	c.t.Helper()
	c.send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Goodbye{Goodbye: &tetherv1.Goodbye{Reason: "test"}}})
}

func (c *client) flowControl(window uint32) {
	c.t.Helper()
	c.send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_FlowControl{FlowControl: &tetherv1.FlowControl{Window: window}}})
}

// next waits for the next message from the broker.
func (c *client) next() *tetherv1.ConnectResponse {
	c.t.Helper()
	select {
	case msg := <-c.msgs:
		return msg
	case <-c.ended:
		// Messages read before the end are still queued.
		select {
		case msg := <-c.msgs:
			return msg
		default:
		}
		c.t.Fatalf("stream ended while waiting for a message: %v", c.err)
	case <-time.After(wait):
		c.t.Fatal("no message from the broker")
	}
	return nil
}

func (c *client) welcome() *tetherv1.Welcome {
	c.t.Helper()
	msg := c.next()
	if msg.GetWelcome() == nil {
		c.t.Fatalf("got %v, want welcome", msg)
	}
	return msg.GetWelcome()
}

func (c *client) delivery() *tetherv1.Delivery {
	c.t.Helper()
	msg := c.next()
	if msg.GetDelivery() == nil {
		c.t.Fatalf("got %v, want a delivery", msg)
	}
	return msg.GetDelivery()
}

// end waits for the stream to end, with no message before, and returns the
// status the broker ended it with (OK for io.EOF).
func (c *client) end() *status.Status {
	c.t.Helper()
	select {
	case msg := <-c.msgs:
		c.t.Fatalf("got %v, want the stream to end", msg)
	case <-c.ended:
	case <-time.After(wait):
		c.t.Fatal("the stream did not end")
	}
	if errors.Is(c.err, io.EOF) {
		return status.New(codes.OK, "")
	}
	return status.Convert(c.err)
}

func hello(mods ...func(*tetherv1.Hello)) *tetherv1.ConnectRequest {
	h := &tetherv1.Hello{
		Handler:         "secret-ttl",
		InstanceId:      "pod-1",
		ProtocolVersion: "v1",
		Sdk:             "test",
		Bindings: []*tetherv1.Binding{{
			Id:       "on-create",
			Kind:     tetherv1.BindingKind_BINDING_KIND_CREATE,
			Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"},
		}},
	}
	for _, m := range mods {
		m(h)
	}
	return &tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Hello{Hello: h}}
}

func withWindow(n uint32) func(*tetherv1.Hello) { return func(h *tetherv1.Hello) { h.Window = n } }

// session connects, says hello and returns the client and the instance.
func (h *harness) session(t *testing.T, mods ...func(*tetherv1.Hello)) (*client, *Instance) {
	t.Helper()
	c := h.connect(t)
	c.send(hello(mods...))
	c.welcome()
	return c, h.instance(t).in
}

type result struct {
	id  string
	ack *tetherv1.Ack
	err error
}

// deliver runs Deliver in a goroutine; its result arrives on the returned
// channel.
func deliver(ctx context.Context, in *Instance, id string) <-chan result {
	out := make(chan result, 1)
	go func() {
		ack, err := in.Deliver(ctx, &tetherv1.Delivery{Id: id, BindingId: "on-create", Kind: tetherv1.DeliveryKind_DELIVERY_KIND_CREATE})
		out <- result{id, ack, err}
	}()
	return out
}

func await(t *testing.T, c <-chan result) result {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(wait):
		t.Fatal("Deliver did not return")
		return result{}
	}
}

// pending fails if Deliver already returned.
func pending(t *testing.T, c <-chan result) {
	t.Helper()
	select {
	case r := <-c:
		t.Fatalf("Deliver %s returned early: %v, %v", r.id, r.ack, r.err)
	default:
	}
}

func TestWelcomeCarriesResolvedResourcesAndCappedWindow(t *testing.T) {
	tests := []struct {
		name  string
		asked uint32
		want  uint32
	}{
		{"the default when none is asked", 0, 5},
		{"what was asked", 3, 3},
		{"capped", 100, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, Options{DefaultWindow: 5, MaxWindow: 8, Version: "v1.2.3"})
			c := h.connect(t)
			c.send(hello(withWindow(tt.asked), func(h *tetherv1.Hello) {
				h.Bindings = append(h.Bindings,
					&tetherv1.Binding{Id: "ns-delete", Kind: tetherv1.BindingKind_BINDING_KIND_DELETE, Resource: &tetherv1.Resource{Kind: "Namespace"}},
					&tetherv1.Binding{Id: "widgets", Kind: tetherv1.BindingKind_BINDING_KIND_UPDATE,
						Resource: &tetherv1.Resource{Group: "test.tether.dev", Resource: "widgets"}, Namespaces: []string{"a"}})
			}))
			w := c.welcome()
			a := h.instance(t)

			if w.GetWindow() != tt.want {
				t.Errorf("window %d, want %d", w.GetWindow(), tt.want)
			}
			if w.GetBrokerVersion() != "v1.2.3" {
				t.Errorf("broker version %q", w.GetBrokerVersion())
			}
			if w.GetSessionId() == "" || w.GetSessionId() != a.in.SessionID {
				t.Errorf("session id %q, instance has %q", w.GetSessionId(), a.in.SessionID)
			}
			want := []*tetherv1.Resource{
				{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true},
				{Version: "v1", Resource: "namespaces", Kind: "Namespace"},
				{Group: "test.tether.dev", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true},
			}
			if len(w.GetResources()) != len(want) {
				t.Fatalf("resources %v, want %v", w.GetResources(), want)
			}
			for i := range want {
				if !proto.Equal(w.GetResources()[i], want[i]) {
					t.Errorf("resources[%d] = %v, want %v", i, w.GetResources()[i], want[i])
				}
			}
			if a.in.Handler != "secret-ttl" || a.in.ID != "pod-1" || a.in.String() != "secret-ttl/pod-1" {
				t.Errorf("instance %s (%q, %q)", a.in, a.in.Handler, a.in.ID)
			}
			if len(a.bindings) != 3 || a.bindings[1].ID != "ns-delete" || a.bindings[1].Resource != namespaces {
				t.Errorf("attached bindings %+v", a.bindings)
			}
		})
	}
}

func TestSessionIDsAreUnique(t *testing.T) {
	h := start(t, Options{})
	_, a := h.session(t)
	_, b := h.session(t, func(h *tetherv1.Hello) { h.InstanceId = "pod-2" })
	if a.SessionID == b.SessionID {
		t.Errorf("two sessions share the id %q", a.SessionID)
	}
}

func TestConnectRefusesBadSessions(t *testing.T) {
	tooMany := func(h *tetherv1.Hello) {
		for i := range 3 {
			h.Bindings = append(h.Bindings, &tetherv1.Binding{Id: fmt.Sprintf("b%d", i), Kind: tetherv1.BindingKind_BINDING_KIND_CREATE,
				Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"}})
		}
	}
	secondBinding := func(b *tetherv1.Binding) func(*tetherv1.Hello) {
		return func(h *tetherv1.Hello) { h.Bindings = append(h.Bindings, b) }
	}
	tests := []struct {
		name     string
		first    *tetherv1.ConnectRequest // nil: send nothing
		attacher error
		code     codes.Code
		msg      []string
	}{
		{
			name:  "a first message that is not hello",
			first: &tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Ack{Ack: &tetherv1.Ack{DeliveryId: "x"}}},
			code:  codes.InvalidArgument, msg: []string{"first message must be hello"},
		},
		{
			name: "no hello in time",
			code: codes.DeadlineExceeded, msg: []string{"no hello within 200ms"},
		},
		{
			name:  "an invalid handler name",
			first: hello(func(h *tetherv1.Hello) { h.Handler = "Secret_TTL" }),
			code:  codes.InvalidArgument, msg: []string{"handler:", "Secret_TTL"},
		},
		{
			name:  "no handler name",
			first: hello(func(h *tetherv1.Hello) { h.Handler = "" }),
			code:  codes.InvalidArgument, msg: []string{"handler: is required"},
		},
		{
			name:  "no instance id",
			first: hello(func(h *tetherv1.Hello) { h.InstanceId = "" }),
			code:  codes.InvalidArgument, msg: []string{"instance_id"},
		},
		{
			name:  "an instance id that is too long",
			first: hello(func(h *tetherv1.Hello) { h.InstanceId = strings.Repeat("i", 254) }),
			code:  codes.InvalidArgument, msg: []string{"instance_id"},
		},
		{
			name:  "another protocol version",
			first: hello(func(h *tetherv1.Hello) { h.ProtocolVersion = "v2" }),
			code:  codes.InvalidArgument, msg: []string{"protocol_version", "v2"},
		},
		{
			name:  "too many bindings",
			first: hello(tooMany),
			code:  codes.InvalidArgument, msg: []string{"bindings: 4 is more than the 3 allowed"},
		},
		{
			name:  "no bindings",
			first: hello(func(h *tetherv1.Hello) { h.Bindings = nil }),
			code:  codes.InvalidArgument, msg: []string{"bindings[0].bindings", "at least one binding"},
		},
		{
			name: "a bad label selector",
			first: hello(secondBinding(&tetherv1.Binding{Id: "second", Kind: tetherv1.BindingKind_BINDING_KIND_UPDATE,
				Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"}, LabelSelector: "app in ("})),
			code: codes.InvalidArgument, msg: []string{`bindings[1] ("second").label_selector: `},
		},
		{
			name: "an unknown resource",
			first: hello(secondBinding(&tetherv1.Binding{Id: "gizmos", Kind: tetherv1.BindingKind_BINDING_KIND_CREATE,
				Resource: &tetherv1.Resource{Version: "v1", Resource: "gizmos"}})),
			code: codes.InvalidArgument, msg: []string{`bindings[1] ("gizmos").resource: `, "not found"},
		},
		{
			name: "CEL that does not compile",
			first: hello(secondBinding(&tetherv1.Binding{Id: "cel", Kind: tetherv1.BindingKind_BINDING_KIND_CREATE,
				Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"}, When: "object."})),
			code: codes.InvalidArgument, msg: []string{`bindings[1] ("cel").when: `},
		},
		{
			name: "an unsupported kind",
			first: hello(secondBinding(&tetherv1.Binding{Id: "admit", Kind: tetherv1.BindingKind_BINDING_KIND_VALIDATE,
				Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"}})),
			code: codes.Unimplemented, msg: []string{`bindings[1] ("admit").kind: `, "validate"},
		},
		{
			name:     "an attacher error",
			first:    hello(),
			attacher: errors.New("handler secret-ttl is declared with other bindings"),
			code:     codes.FailedPrecondition, msg: []string{`"secret-ttl"`, "other bindings"},
		},
		{
			name:     "an attacher refusal a retry fixes",
			first:    hello(),
			attacher: fmt.Errorf("%w: its bindings differ from those of the 2 connected instance(s)", ErrTryLater),
			code:     codes.Unavailable, msg: []string{`"secret-ttl"`, "bindings differ"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, Options{HelloTimeout: 200 * time.Millisecond, MaxBindings: 3})
			h.attacher.err = tt.attacher
			c := h.connect(t)
			if tt.first != nil {
				c.send(tt.first)
			}
			st := c.end()
			if st.Code() != tt.code {
				t.Errorf("code %v (%q), want %v", st.Code(), st.Message(), tt.code)
			}
			for _, m := range tt.msg {
				if !strings.Contains(st.Message(), m) {
					t.Errorf("message %q does not contain %q", st.Message(), m)
				}
			}
			if attaches, _ := h.attacher.counts(); attaches != 0 {
				t.Errorf("%d instances attached", attaches)
			}
		})
	}
}

func TestDeliverReturnsTheMatchingAck(t *testing.T) {
	h := start(t, Options{})
	c, in := h.session(t, withWindow(4))

	first := deliver(context.Background(), in, "d1")
	if d := c.delivery(); d.GetId() != "d1" || d.GetBindingId() != "on-create" || d.GetKind() != tetherv1.DeliveryKind_DELIVERY_KIND_CREATE {
		t.Fatalf("delivery %v", d)
	}
	second := deliver(context.Background(), in, "d2")
	if d := c.delivery(); d.GetId() != "d2" {
		t.Fatalf("delivery %v", d)
	}
	if in.InFlight() != 2 {
		t.Errorf("InFlight = %d, want 2", in.InFlight())
	}
	// Answered in the other order, each Deliver gets its own ack.
	want2 := c.ack("d2", tetherv1.Outcome_OUTCOME_RETRY)
	if r := await(t, second); r.err != nil || !proto.Equal(r.ack, want2) {
		t.Errorf("Deliver d2 = %v, %v; want %v", r.ack, r.err, want2)
	}
	pending(t, first)
	want1 := c.ack("d1", tetherv1.Outcome_OUTCOME_OK)
	if r := await(t, first); r.err != nil || !proto.Equal(r.ack, want1) {
		t.Errorf("Deliver d1 = %v, %v; want %v", r.ack, r.err, want1)
	}
	if in.InFlight() != 0 {
		t.Errorf("InFlight = %d after the acks", in.InFlight())
	}
}

func TestUnknownAcksAndMessagesAreIgnored(t *testing.T) {
	h := start(t, Options{})
	c, in := h.session(t)

	c.ack("never-sent", tetherv1.Outcome_OUTCOME_OK)
	c.send(&tetherv1.ConnectRequest{}) // no message at all
	// A delivery acked twice: the second ack is unknown by then.
	r := deliver(context.Background(), in, "d1")
	c.delivery()
	want := c.ack("d1", tetherv1.Outcome_OUTCOME_OK)
	c.ack("d1", tetherv1.Outcome_OUTCOME_FAIL)
	if got := await(t, r); got.err != nil || !proto.Equal(got.ack, want) {
		t.Errorf("Deliver = %v, %v", got.ack, got.err)
	}

	// The stream is still up.
	r = deliver(context.Background(), in, "d2")
	c.delivery()
	c.ack("d2", tetherv1.Outcome_OUTCOME_OK)
	if got := await(t, r); got.err != nil {
		t.Errorf("Deliver after unknown acks: %v", got.err)
	}
	select {
	case <-in.Done():
		t.Error("the session ended")
	default:
	}
}

func TestWindowBoundsConcurrentDeliveries(t *testing.T) {
	h := start(t, Options{})
	c, in := h.session(t, withWindow(2))

	results := make([]<-chan result, 5)
	for i := range results {
		results[i] = deliver(context.Background(), in, fmt.Sprintf("d%d", i))
	}
	got := map[string]bool{}
	for range 2 {
		got[c.delivery().GetId()] = true
	}
	if in.InFlight() != 2 {
		t.Errorf("InFlight = %d, want 2", in.InFlight())
	}

	// One ack frees one slot: exactly one more delivery comes.
	var acked string
	for id := range got {
		acked = id
		break
	}
	c.ack(acked, tetherv1.Outcome_OUTCOME_OK)
	third := c.delivery().GetId()
	if got[third] {
		t.Fatalf("delivery %s sent twice", third)
	}
	got[third] = true

	// Goodbye turns away every Deliver that is still waiting for a slot.
	// Had any of them been sent, it would wait for its ack instead.
	c.goodbye()
	byID := map[string]<-chan result{}
	for i, r := range results {
		byID[fmt.Sprintf("d%d", i)] = r
	}
	for id, r := range byID {
		if got[id] {
			continue
		}
		if res := await(t, r); !errors.Is(res.err, ErrLeaving) {
			t.Errorf("Deliver %s = %v, %v; want ErrLeaving", id, res.ack, res.err)
		}
	}
	// The deliveries in flight are still answered.
	for id := range got {
		if id != acked {
			c.ack(id, tetherv1.Outcome_OUTCOME_OK)
		}
		if res := await(t, byID[id]); res.err != nil || res.ack.GetDeliveryId() != id {
			t.Errorf("Deliver %s = %v, %v", id, res.ack, res.err)
		}
	}
}

func TestFlowControlChangesTheWindow(t *testing.T) {
	h := start(t, Options{MaxWindow: 3})
	c, in := h.session(t, withWindow(1))

	results := map[string]<-chan result{}
	for i := range 4 {
		id := fmt.Sprintf("d%d", i)
		results[id] = deliver(context.Background(), in, id)
	}
	sent := map[string]bool{c.delivery().GetId(): true}

	// Raising the window lets more deliveries go without any ack, up to
	// the broker's cap.
	c.flowControl(100)
	for range 2 {
		sent[c.delivery().GetId()] = true
	}
	if in.InFlight() != 3 {
		t.Errorf("InFlight = %d, want 3", in.InFlight())
	}
	c.goodbye()
	for id, r := range results {
		if sent[id] {
			continue
		}
		if res := await(t, r); !errors.Is(res.err, ErrLeaving) {
			t.Errorf("Deliver %s = %v, %v; want ErrLeaving: the window went past the cap", id, res.ack, res.err)
		}
	}
	for id := range sent {
		c.ack(id, tetherv1.Outcome_OUTCOME_OK)
		if res := await(t, results[id]); res.err != nil {
			t.Errorf("Deliver %s: %v", id, res.err)
		}
	}
}

func TestFlowControlOfZeroRestoresTheDefault(t *testing.T) {
	h := start(t, Options{DefaultWindow: 2})
	c, in := h.session(t, withWindow(1))

	// The window drops to 1 and then, with 0, back to the default 2.
	c.flowControl(1)
	c.flowControl(0)
	a := deliver(context.Background(), in, "a")
	b := deliver(context.Background(), in, "b")
	ids := map[string]bool{c.delivery().GetId(): true, c.delivery().GetId(): true}
	if !ids["a"] || !ids["b"] {
		t.Fatalf("deliveries %v", ids)
	}
	c.ack("a", tetherv1.Outcome_OUTCOME_OK)
	c.ack("b", tetherv1.Outcome_OUTCOME_OK)
	await(t, a)
	await(t, b)
}

func TestGoodbyeMakesDeliverReturnErrLeaving(t *testing.T) {
	h := start(t, Options{})
	c, in := h.session(t)
	if in.Leaving() {
		t.Fatal("leaving before goodbye")
	}

	// Messages are handled in order: once the ack sent after Goodbye is
	// handled, so is Goodbye.
	inFlight := deliver(context.Background(), in, "before")
	c.delivery()
	c.goodbye()
	want := c.ack("before", tetherv1.Outcome_OUTCOME_OK)
	if r := await(t, inFlight); r.err != nil || !proto.Equal(r.ack, want) {
		t.Fatalf("a delivery sent before goodbye: %v, %v", r.ack, r.err)
	}
	if !in.Leaving() {
		t.Error("Leaving() = false after goodbye")
	}
	if r := await(t, deliver(context.Background(), in, "after")); !errors.Is(r.err, ErrLeaving) {
		t.Errorf("Deliver after goodbye = %v, %v; want ErrLeaving", r.ack, r.err)
	}
	// Goodbye with nothing left in flight: the broker ends the stream.
	select {
	case <-in.Done():
	case <-time.After(10 * time.Second):
		t.Error("the session did not end after goodbye with nothing in flight")
	}
}

func TestClosingTheStreamEndsPendingDelivers(t *testing.T) {
	tests := []struct {
		name  string
		close func(*client)
		code  codes.Code
	}{
		{"the client cancels", func(c *client) { c.cancel() }, codes.Canceled},
		{"the client closes its side", func(c *client) {
			if err := c.stream.CloseSend(); err != nil {
				c.t.Fatal(err)
			}
		}, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, Options{})
			c, in := h.session(t, withWindow(1))

			sent := deliver(context.Background(), in, "sent")
			c.delivery()
			waiting := deliver(context.Background(), in, "waiting") // no slot
			pending(t, sent)

			tt.close(c)
			for _, r := range []<-chan result{sent, waiting} {
				if res := await(t, r); !errors.Is(res.err, ErrGone) {
					t.Errorf("Deliver %s = %v, %v; want ErrGone", res.id, res.ack, res.err)
				}
			}
			select {
			case <-in.Done():
			case <-time.After(wait):
				t.Fatal("Done not closed")
			}
			if r := await(t, deliver(context.Background(), in, "later")); !errors.Is(r.err, ErrGone) {
				t.Errorf("Deliver after the end = %v, %v; want ErrGone", r.ack, r.err)
			}
			if st := c.end(); st.Code() != tt.code {
				t.Errorf("stream ended with %v, want %v", st, tt.code)
			}
			// Done is closed before detach is called; the harness checks
			// at cleanup that detach ran exactly once.
		})
	}
}

func TestDetachIsCalledOnceWhenTheSessionEnds(t *testing.T) {
	h := start(t, Options{})
	c, in := h.session(t)
	select {
	case id := <-h.attacher.detached:
		t.Fatalf("session %s detached while connected", id)
	default:
	}
	c.cancel()
	select {
	case id := <-h.attacher.detached:
		if id != in.SessionID {
			t.Errorf("detached session %s, want %s", id, in.SessionID)
		}
	case <-time.After(wait):
		t.Fatal("detach was not called")
	}
	select {
	case <-in.Done():
	default:
		t.Error("detach was called before Done was closed")
	}
	// A second detach would show at cleanup, which counts them once every
	// Connect has returned.
}

// TestAbandonedDeliverSendsCancelAndKeepsItsSlot: a Deliver that stops
// waiting for a sent delivery, because its context ends or its expiry
// fires, tells the instance to cancel it; the instance still holds it until
// it acks, so its window slot stays taken until then.
func TestAbandonedDeliverSendsCancelAndKeepsItsSlot(t *testing.T) {
	for _, tc := range []struct {
		name string
		want error
		// end makes the Deliver of "slow" stop waiting.
		deliver func(in *Instance) (first <-chan result, end func())
	}{
		{"context cancelled", context.Canceled, func(in *Instance) (<-chan result, func()) {
			ctx, cancel := context.WithCancel(context.Background())
			return deliver(ctx, in, "slow"), cancel
		}},
		{"expired", context.DeadlineExceeded, func(in *Instance) (<-chan result, func()) {
			expired := make(chan time.Time, 1)
			out := make(chan result, 1)
			go func() {
				d := &tetherv1.Delivery{Id: "slow", BindingId: "on-create", Kind: tetherv1.DeliveryKind_DELIVERY_KIND_CREATE}
				ack, err := in.DeliverUnless(context.Background(), d, nil, expired)
				out <- result{"slow", ack, err}
			}()
			return out, func() { expired <- time.Now() }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, Options{})
			c, in := h.session(t, withWindow(1))

			first, end := tc.deliver(in)
			c.delivery()
			end()
			if r := await(t, first); !errors.Is(r.err, tc.want) {
				t.Fatalf("Deliver = %v, %v; want %v", r.ack, r.err, tc.want)
			}
			msg := c.next()
			if msg.GetCancel().GetDeliveryId() != "slow" || msg.GetCancel().GetReason() == "" {
				t.Fatalf("got %v, want a cancel of slow with a reason", msg)
			}
			if n := in.InFlight(); n != 1 {
				t.Fatalf("InFlight = %d after it stopped waiting, want 1: the instance still runs the delivery", n)
			}
			next := deliver(context.Background(), in, "next")
			pending(t, next)
			c.ack("slow", tetherv1.Outcome_OUTCOME_RETRY)
			if d := c.delivery(); d.GetId() != "next" {
				t.Fatalf("delivery %v, want next", d)
			}
			want := c.ack("next", tetherv1.Outcome_OUTCOME_OK)
			if r := await(t, next); r.err != nil || !proto.Equal(r.ack, want) {
				t.Errorf("Deliver next = %v, %v", r.ack, r.err)
			}
			if n := in.InFlight(); n != 0 {
				t.Errorf("InFlight = %d at the end", n)
			}
		})
	}
}

func TestDeliverThatTimesOutWaitingForASlotSendsNothing(t *testing.T) {
	h := start(t, Options{})
	c, in := h.session(t, withWindow(1))

	held := deliver(context.Background(), in, "held")
	c.delivery()
	ctx, cancel := context.WithCancel(context.Background())
	blocked := deliver(ctx, in, "blocked")
	cancel()
	if r := await(t, blocked); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Deliver = %v, %v; want context.Canceled", r.ack, r.err)
	}
	// Nothing about "blocked" reaches the client: the next message is the
	// one sent after the ack.
	c.ack("held", tetherv1.Outcome_OUTCOME_OK)
	await(t, held)
	after := deliver(context.Background(), in, "after")
	if d := c.delivery(); d.GetId() != "after" {
		t.Fatalf("delivery %v, want after", d)
	}
	c.ack("after", tetherv1.Outcome_OUTCOME_OK)
	await(t, after)
}

func TestASecondHelloEndsTheStream(t *testing.T) {
	h := start(t, Options{})
	c, in := h.session(t)
	r := deliver(context.Background(), in, "d1")
	c.delivery()

	c.send(hello())
	st := c.end()
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "only once") {
		t.Errorf("status %v, want InvalidArgument about hello", st)
	}
	if res := await(t, r); !errors.Is(res.err, ErrGone) {
		t.Errorf("Deliver = %v, %v; want ErrGone", res.ack, res.err)
	}
}

// TestCancelRacingAckFreesTheSlotOnce cancels each Deliver just as its ack is
// sent: whichever wins, the slot is freed exactly once.
func TestCancelRacingAckFreesTheSlotOnce(t *testing.T) {
	h := start(t, Options{})
	c, in := h.session(t, withWindow(4))

	const n = 100
	cancels := map[string]context.CancelFunc{}
	var results []<-chan result
	for i := range n {
		id := fmt.Sprintf("d%d", i)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cancels[id] = cancel
		results = append(results, deliver(ctx, in, id))
	}
	for acked := 0; acked < n; {
		d := c.next().GetDelivery()
		if d == nil {
			continue // a cancel
		}
		cancels[d.GetId()]()
		c.ack(d.GetId(), tetherv1.Outcome_OUTCOME_OK)
		acked++
	}
	for _, r := range results {
		if res := await(t, r); res.err != nil && !errors.Is(res.err, context.Canceled) {
			t.Errorf("Deliver %s: %v", res.id, res.err)
		}
	}
	// Acks are handled in order: once the barrier's ack is, all are.
	barrier := deliver(context.Background(), in, "barrier")
	for {
		if d := c.next().GetDelivery(); d.GetId() == "barrier" {
			break
		}
	}
	c.ack("barrier", tetherv1.Outcome_OUTCOME_OK)
	await(t, barrier)
	if got := in.InFlight(); got != 0 {
		t.Errorf("InFlight = %d after every delivery was acked", got)
	}
}

func TestDaemonExitedReachesTheInstancesCallback(t *testing.T) {
	h := start(t, Options{})
	c, in := h.session(t)
	exited := make(chan *tetherv1.DaemonExited, 1)
	in.OnDaemonExited(func(m *tetherv1.DaemonExited) { exited <- m })

	want := &tetherv1.DaemonExited{BindingId: "watch", Uid: "u-1", Failed: true, Message: "boom"}
	c.send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_DaemonExited{DaemonExited: want}})
	select {
	case got := <-exited:
		if !proto.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	case <-time.After(wait):
		t.Fatal("the callback was not called")
	}
	// Without a callback the report is dropped and the session goes on.
	in.OnDaemonExited(nil)
	c.send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_DaemonExited{DaemonExited: want}})
	r := deliver(context.Background(), in, "d1")
	c.delivery()
	c.ack("d1", tetherv1.Outcome_OUTCOME_OK)
	if res := await(t, r); res.err != nil {
		t.Errorf("Deliver after a dropped report: %v", res.err)
	}
}
