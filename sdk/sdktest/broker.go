package sdktest

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// Timeout bounds every wait of a Broker: for the handler to connect, and
// for one delivery's answer.
const Timeout = 10 * time.Second

// Broker is an in-memory broker for one handler.
type Broker struct {
	t   testing.TB
	lis *bufconn.Listener

	connected chan struct{} // closed at the first Hello
	mu        sync.Mutex
	hello     *tetherv1.Hello
	send      chan *tetherv1.ConnectResponse
	pending   map[string]chan *tetherv1.Ack
	seq       int
}

// New starts a Broker that lives until the test ends.
func New(t testing.TB) *Broker {
	t.Helper()
	b := &Broker{t: t, lis: bufconn.Listen(1 << 20), connected: make(chan struct{}),
		send: make(chan *tetherv1.ConnectResponse), pending: map[string]chan *tetherv1.Ack{}}
	srv := grpc.NewServer()
	tetherv1.RegisterBrokerServiceServer(srv, &service{b: b})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(b.lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return b
}

// Options are the sdk options that make a handler talk to b: its dialer,
// plain text, and quick reconnects. Give them to sdk.New, before your own.
func (b *Broker) Options() []sdk.Option {
	return []sdk.Option{
		sdk.WithDialer(func(ctx context.Context, _ string) (net.Conn, error) { return b.lis.DialContext(ctx) }),
		sdk.WithInsecure(),
		sdk.WithReconnectBackoff(10*time.Millisecond, 100*time.Millisecond),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{Name: "sdktest", Level: hclog.Warn, Output: testWriter{b.t}})),
	}
}

// Run runs h until the test ends and waits for it to connect. h must have
// been made with b.Options.
func (b *Broker) Run(h *sdk.Handler) {
	b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, "passthrough:///sdktest") }()
	b.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.t.Errorf("sdktest: handler %s: %v", h.Name(), err)
		}
	})
	select {
	case <-b.connected:
	case err := <-done:
		b.t.Fatalf("sdktest: handler %s stopped before it connected: %v", h.Name(), err)
	case <-time.After(Timeout):
		b.t.Fatalf("sdktest: handler %s did not connect within %v", h.Name(), Timeout)
	}
}

// Bindings are the handler's bindings, as its Hello announced them.
func (b *Broker) Bindings() []*tetherv1.Binding {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hello.GetBindings()
}

// deliver sends d and waits for its ack.
func (b *Broker) deliver(d *tetherv1.Delivery) (*tetherv1.Ack, error) {
	b.mu.Lock()
	b.seq++
	d.Id = "sdktest-" + strconv.Itoa(b.seq)
	c := make(chan *tetherv1.Ack, 1)
	b.pending[d.Id] = c
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.pending, d.Id)
		b.mu.Unlock()
	}()
	timeout := time.After(Timeout)
	select {
	case b.send <- &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Delivery{Delivery: d}}:
	case <-timeout:
		return nil, errors.New("the handler took no delivery within the timeout")
	}
	select {
	case ack := <-c:
		return ack, nil
	case <-timeout:
		return nil, errors.New("the handler did not answer within the timeout")
	}
}

// service is the gRPC side of a Broker.
type service struct {
	tetherv1.UnimplementedBrokerServiceServer
	b *Broker
}

func (s *service) Connect(stream tetherv1.BrokerService_ConnectServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return errors.New("sdktest: the first message is not hello")
	}
	window := hello.GetWindow()
	if window == 0 {
		window = 16
	}
	err = stream.Send(&tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Welcome{Welcome: &tetherv1.Welcome{
		SessionId: "sdktest", Window: window, BrokerVersion: "sdktest",
	}}})
	if err != nil {
		return err
	}
	b := s.b
	b.mu.Lock()
	firstHello := b.hello == nil
	b.hello = hello
	b.mu.Unlock()
	if firstHello {
		close(b.connected)
	}
	recvErr := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if ack := msg.GetAck(); ack != nil {
				b.mu.Lock()
				c := b.pending[ack.GetDeliveryId()]
				b.mu.Unlock()
				if c != nil {
					select {
					case c <- ack:
					default: // a second ack for one delivery
					}
				}
			}
		}
	}()
	for {
		select {
		case m := <-b.send:
			if err := stream.Send(m); err != nil {
				return err
			}
		case err := <-recvErr:
			return err
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// testWriter writes the handler's log lines into the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
