package sdk_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/timestamppb"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// wait bounds every wait in these tests; nothing sleeps.
const wait = 10 * time.Second

const target = "passthrough:///bufnet"

// fakeBroker is a minimal BrokerServiceServer: it records Hellos, answers
// Welcome (or what admit says), and hands each session to the test.
type fakeBroker struct {
	tetherv1.UnimplementedBrokerServiceServer

	// admit decides about a Hello; a non-nil error ends the stream with it.
	admit  func(ctx context.Context, n int, hello *tetherv1.Hello) error
	window uint32
	// capabilities go in Welcome.
	capabilities []tetherv1.Capability
	// reviewsOnly goes in Welcome: a follower taking the session for
	// reviews only.
	reviewsOnly bool
	hellos      atomic.Int32
	sessions    chan *fakeSession
}

// fakeSession is one accepted Connect stream, driven by the test.
type fakeSession struct {
	hello   *tetherv1.Hello
	md      metadata.MD
	toSDK   chan *tetherv1.ConnectResponse
	fromSDK chan *tetherv1.ConnectRequest
	// end ends the stream with the given error (nil: OK).
	end chan error
	// closed is closed when the handler has closed its side (CloseSend).
	closed chan struct{}
	// done is closed when Connect has returned.
	done chan struct{}
}

func (f *fakeBroker) Connect(stream tetherv1.BrokerService_ConnectServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	n := int(f.hellos.Add(1))
	hello := first.GetHello()
	if f.admit != nil {
		if err := f.admit(stream.Context(), n, hello); err != nil {
			return err
		}
	}
	md, _ := metadata.FromIncomingContext(stream.Context())
	s := &fakeSession{
		hello:   hello,
		md:      md,
		toSDK:   make(chan *tetherv1.ConnectResponse),
		fromSDK: make(chan *tetherv1.ConnectRequest, 1024),
		end:     make(chan error, 1),
		closed:  make(chan struct{}),
		done:    make(chan struct{}),
	}
	defer close(s.done)
	window := hello.GetWindow()
	if f.window > 0 && f.window < window {
		window = f.window
	}
	err = stream.Send(&tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Welcome{Welcome: &tetherv1.Welcome{
		SessionId: "s1", Window: window, BrokerVersion: "fake", Capabilities: f.capabilities, ReviewsOnly: f.reviewsOnly,
	}}})
	if err != nil {
		return err
	}
	select {
	case f.sessions <- s:
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	recvDone := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			select {
			case s.fromSDK <- m:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	for {
		select {
		case m := <-s.toSDK:
			if err := stream.Send(m); err != nil {
				return err
			}
		case err := <-s.end:
			return err
		case err := <-recvDone:
			if errors.Is(err, io.EOF) {
				close(s.closed)
				return nil
			}
			return err
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// harness runs a fakeBroker on an in-memory listener that can be replaced
// (a broker restart).
type harness struct {
	t      *testing.T
	broker *fakeBroker
	creds  credentials.TransportCredentials
	logs   *logSink

	mu  sync.Mutex
	lis *bufconn.Listener
	srv *grpc.Server
}

func newHarness(t *testing.T, broker *fakeBroker) *harness {
	t.Helper()
	if broker == nil {
		broker = &fakeBroker{}
	}
	broker.sessions = make(chan *fakeSession, 16)
	h := &harness{t: t, broker: broker, logs: &logSink{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("handler log:\n%s", h.logs.String())
		}
	})
	h.start()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) withTLS(cfg *tls.Config) *harness {
	h.stop()
	h.creds = credentials.NewTLS(cfg)
	h.start()
	return h
}

func (h *harness) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	var opts []grpc.ServerOption
	if h.creds != nil {
		opts = append(opts, grpc.Creds(h.creds))
	}
	h.lis = bufconn.Listen(1 << 20)
	h.srv = grpc.NewServer(opts...)
	tetherv1.RegisterBrokerServiceServer(h.srv, h.broker)
	go func(srv *grpc.Server, lis net.Listener) { _ = srv.Serve(lis) }(h.srv, h.lis)
}

func (h *harness) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.srv.Stop()
}

// restart stops the broker, dropping every stream, and starts a new one on
// a new listener.
func (h *harness) restart() {
	h.stop()
	h.start()
}

func (h *harness) dial(ctx context.Context, _ string) (net.Conn, error) {
	h.mu.Lock()
	lis := h.lis
	h.mu.Unlock()
	return lis.DialContext(ctx)
}

// options are the defaults for a handler under test: in-memory dialer,
// plain text, fast reconnects, a log the test can watch.
func (h *harness) options(extra ...sdk.Option) []sdk.Option {
	logger := hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: h.logs})
	opts := []sdk.Option{
		sdk.WithDialer(h.dial),
		sdk.WithLogger(logger),
		sdk.WithInstanceID("test-1"),
		sdk.WithReconnectBackoff(time.Millisecond, 20*time.Millisecond),
	}
	if h.creds == nil {
		opts = append(opts, sdk.WithInsecure())
	}
	return append(opts, extra...)
}

// run starts Run in the background. stop cancels it and returns its error;
// it is also called at cleanup.
func (h *harness) run(handler *sdk.Handler) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- handler.Run(ctx, target) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(wait):
				h.t.Errorf("Run did not return within %s of cancellation", wait)
			}
		})
		return err
	}
	h.t.Cleanup(func() { _ = stop() })
	return stop
}

// runErr starts Run and returns the channel its result arrives on.
func (h *harness) runErr(ctx context.Context, handler *sdk.Handler) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- handler.Run(ctx, target) }()
	return errc
}

func (h *harness) session() *fakeSession {
	h.t.Helper()
	return recv(h.t, h.broker.sessions, "a session")
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("timed out after %s waiting for %s", wait, what)
		panic("unreachable")
	}
}

func closedWithin(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("timed out after %s waiting for %s", wait, what)
	}
}

func (s *fakeSession) send(t *testing.T, m *tetherv1.ConnectResponse) {
	t.Helper()
	select {
	case s.toSDK <- m:
	case <-s.done:
		t.Fatalf("session ended before %v could be sent", m)
	case <-time.After(wait):
		t.Fatalf("timed out sending %v", m)
	}
}

func (s *fakeSession) deliver(t *testing.T, d *tetherv1.Delivery) {
	t.Helper()
	s.send(t, &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Delivery{Delivery: d}})
}

func (s *fakeSession) cancel(t *testing.T, id, reason string) {
	t.Helper()
	s.send(t, &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Cancel{Cancel: &tetherv1.Cancel{DeliveryId: id, Reason: reason}}})
}

// next returns the next message from the handler.
func (s *fakeSession) next(t *testing.T) *tetherv1.ConnectRequest {
	t.Helper()
	return recv(t, s.fromSDK, "a message from the handler")
}

// goodbye waits for the handler's Goodbye, which a stopping handler sends
// as soon as it begins to drain.
func (s *fakeSession) goodbye(t *testing.T) {
	t.Helper()
	if m := s.next(t); m.GetGoodbye() == nil {
		t.Fatalf("want Goodbye, got %v", m)
	}
}

// ack returns the next message from the handler, which must be an Ack.
func (s *fakeSession) ack(t *testing.T) *tetherv1.Ack {
	t.Helper()
	m := s.next(t)
	if m.GetAck() == nil {
		t.Fatalf("want an Ack, got %v", m)
	}
	return m.GetAck()
}

// delivery builds a CREATE delivery of a ConfigMap for binding "create-0".
func delivery(id string, mods ...func(*tetherv1.Delivery)) *tetherv1.Delivery {
	d := &tetherv1.Delivery{
		Id:        id,
		BindingId: "create-0",
		Kind:      tetherv1.DeliveryKind_DELIVERY_KIND_CREATE,
		Attempt:   1,
		Ref: &tetherv1.ObjectRef{
			Resource:        &tetherv1.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true},
			Namespace:       "default",
			Name:            "cm-" + id,
			Uid:             "uid-" + id,
			ResourceVersion: "7",
		},
		Object:   []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-` + id + `","namespace":"default"},"data":{"a":"1"}}`),
		Deadline: timestamppb.New(time.Now().Add(time.Hour)),
	}
	for _, m := range mods {
		m(d)
	}
	return d
}

var configMaps = sdk.GVR("", "v1", "configmaps")

// logSink collects the handler's log and lets a test wait for a line.
type logSink struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	waiters map[string]chan struct{}
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for substr, ch := range l.waiters {
		if strings.Contains(l.buf.String(), substr) {
			close(ch)
			delete(l.waiters, substr)
		}
	}
	return len(p), nil
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits until the log contains substr.
func (l *logSink) waitFor(t *testing.T, substr string) {
	t.Helper()
	l.mu.Lock()
	if strings.Contains(l.buf.String(), substr) {
		l.mu.Unlock()
		return
	}
	if l.waiters == nil {
		l.waiters = make(map[string]chan struct{})
	}
	ch, ok := l.waiters[substr]
	if !ok {
		ch = make(chan struct{})
		l.waiters[substr] = ch
	}
	l.mu.Unlock()
	closedWithin(t, ch, "log line "+substr)
}
