package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tether-dev/tether/broker"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// wire is a gRPC proxy between the handler under test and the broker: it
// forwards every message both ways and records it, so that the scenarios
// judge what the handler sent, not only what the broker made of it. It
// changes a message only where a scenario asks (the capabilities, the
// Welcome's window). The broker's status at the end of a stream reaches the
// handler as is, and a stream the kit ends (renew) ends with Unavailable.
// Its gRPC server enforces the broker's keepalive policy, and records each
// GOAWAY it sends (conn.keepalive).
type wire struct {
	tetherv1.UnimplementedBrokerServiceServer
	srv  *grpc.Server
	addr string

	mu sync.Mutex
	// upstream is the broker's, replaced when the kit restarts the broker.
	upstream tetherv1.BrokerServiceClient
	conn     *grpc.ClientConn
	// reject, when set, ends every new stream after its first message with
	// this status, as a broker that refuses the Hello does, without
	// reaching the broker.
	reject *status.Status
	// unavailable is how many of the streams that start from now on the
	// proxy ends with Unavailable after their first message, as a broker
	// that is not ready does (reconnect.backoff).
	unavailable int
	changed     chan struct{} // closed and replaced at every record
	streams     []*stream
	// goaways are those the proxy's gRPC server, which enforces the
	// broker's keepalive policy, sent the handler (conn.keepalive).
	goaways []goaway
	// beforeAck, when set, runs before an ack is forwarded to the broker,
	// with the delivery it answers: a scenario looks at the cluster while
	// the broker has not seen the ack yet.
	beforeAck func(d *tetherv1.Delivery, a *tetherv1.Ack)
	// onGoodbye, when set, runs when the handler's Goodbye reaches the
	// proxy, before the broker has it.
	onGoodbye func(s *stream)
	// hideCapabilities takes the capabilities out of the Hello the broker
	// gets and the Welcome the handler gets (they are recorded as sent):
	// each side then meets a peer older than capabilities.
	hideCapabilities bool
	// window, when not zero, replaces Welcome.window in what the handler
	// gets on the streams that start from now on (the broker's is recorded):
	// the handler then has a smaller window than the broker honours, and the
	// broker sends it more than its window.
	window uint32
	// withheld, when not CAPABILITY_UNSPECIFIED, is taken out of the
	// Welcome's capabilities the handler gets on the streams that start
	// from now on, which still list CAPABILITY_CAPABILITIES (cap.use): the
	// handler then meets a broker without that feature.
	withheld tetherv1.Capability
}

// stream is one Connect stream as the proxy saw it.
type stream struct {
	started time.Time                // when the handler opened it
	first   *tetherv1.ConnectRequest // the handler's first message
	peer    string                   // the handler's address: one per connection
	hello   *tetherv1.Hello
	welcome *tetherv1.Welcome // as the broker sent it
	// window is Welcome.window as the handler got it.
	window uint32
	// offered are Welcome.capabilities as the handler got them.
	offered    []tetherv1.Capability
	deliveries []delivery
	acks       map[string]ackAt // by delivery id, the first for each
	// extraAcks are the acks that named a delivery already acked, or one
	// not sent on this stream (ack.one).
	extraAcks []*tetherv1.Ack
	// unofferedBatches counts the AckBatch messages sent though the Hello
	// or the Welcome the handler got did not list CAPABILITY_ACK_BATCH.
	unofferedBatches int
	exits            []*tetherv1.DaemonExited
	goodbye          time.Time // zero until the handler says Goodbye
	ended            bool
	endedAt          time.Time
	endStatus        *status.Status // how the broker ended it (OK for a clean end)
	// down is the handler's side; sendMu orders what the proxy sends on it
	// (the broker's messages and those the kit injects).
	down   tetherv1.BrokerService_ConnectServer
	sendMu sync.Mutex
	// cut, once set, ends the stream as a broker going away does (renew),
	// which sets wasCut.
	cut    func()
	wasCut bool
}

type delivery struct {
	d  *tetherv1.Delivery
	at time.Time
}

type ackAt struct {
	a  *tetherv1.Ack
	at time.Time
}

// newWire listens on a free loopback port and forwards to the broker at
// brokerAddr (plain text).
func newWire(brokerAddr string, hideCapabilities bool) (*wire, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the handler: %w", err)
	}
	w := &wire{addr: lis.Addr().String(), hideCapabilities: hideCapabilities, changed: make(chan struct{}),
		srv: grpc.NewServer(grpc.MaxRecvMsgSize(64<<20), grpc.KeepaliveEnforcementPolicy(broker.KeepaliveEnforcement()))}
	if err := w.forwardTo(brokerAddr); err != nil {
		lis.Close()
		return nil, err
	}
	tetherv1.RegisterBrokerServiceServer(w.srv, w)
	seen := func(g goaway) { w.record(func() { w.goaways = append(w.goaways, g) }) }
	go func() { _ = w.srv.Serve(goawayListener{Listener: lis, seen: seen}) }()
	return w, nil
}

// forwardTo sends the streams that start from now on to the broker at
// brokerAddr (plain text).
func (w *wire) forwardTo(brokerAddr string) error {
	conn, err := grpc.NewClient(brokerAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return fmt.Errorf("connecting the proxy to the broker: %w", err)
	}
	w.mu.Lock()
	old := w.conn
	w.upstream, w.conn = tetherv1.NewBrokerServiceClient(conn), conn
	w.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

func (w *wire) stop() {
	w.srv.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.conn.Close()
}

// Connect forwards one stream.
func (w *wire) Connect(down tetherv1.BrokerService_ConnectServer) error {
	ctx, cancel := context.WithCancel(down.Context())
	defer cancel()
	s := &stream{acks: map[string]ackAt{}, started: time.Now(), down: down}
	if p, ok := peer.FromContext(down.Context()); ok {
		s.peer = p.Addr.String()
	}
	w.record(func() { w.streams = append(w.streams, s) })
	w.mu.Lock()
	upstream, reject := w.upstream, w.reject
	if reject == nil && w.unavailable > 0 {
		w.unavailable--
		reject = status.New(codes.Unavailable, "conformance: the broker is not ready")
	}
	w.mu.Unlock()
	if reject != nil {
		return w.refuse(s, down, reject)
	}
	up, err := upstream.Connect(ctx)
	if err != nil {
		w.record(func() { s.end(status.Convert(err)) })
		return err
	}
	w.record(func() { s.cut = cancel })
	go w.fromHandler(s, down, up)
	for {
		msg, err := up.Recv()
		if err != nil {
			st := status.Convert(err)
			w.mu.Lock()
			cut := s.wasCut
			w.mu.Unlock()
			switch {
			case errors.Is(err, io.EOF):
				st, err = status.New(0, ""), nil
			case cut:
				st = status.New(codes.Unavailable, "conformance: the kit ends the session for a fresh one")
				err = st.Err()
			}
			w.record(func() { s.end(st) })
			return err
		}
		if msg.GetWelcome() != nil {
			msg = w.rewriteWelcome(s, msg)
		}
		w.record(func() { s.carried(msg) })
		if err := s.send(msg); err != nil {
			return err
		}
	}
}

// carried records the deliveries msg carries to the handler, alone or in
// a batch; the wire's lock must be held.
func (s *stream) carried(msg *tetherv1.ConnectResponse) {
	for _, d := range tetherv1.DeliveriesOf(msg) {
		s.deliveries = append(s.deliveries, delivery{d, time.Now()})
	}
}

// send passes msg on to the handler.
func (s *stream) send(msg *tetherv1.ConnectResponse) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.down.Send(msg)
}

// end records how the stream ended; the wire's lock must be held.
func (s *stream) end(st *status.Status) {
	s.ended, s.endedAt, s.endStatus = true, time.Now(), st
}

// rewriteWelcome records the broker's Welcome and returns the one the
// handler gets: without capabilities, or with another window, when the kit
// asks for it.
func (w *wire) rewriteWelcome(s *stream, msg *tetherv1.ConnectResponse) *tetherv1.ConnectResponse {
	w.mu.Lock()
	window, withheld := w.window, w.withheld
	w.mu.Unlock()
	sent := msg
	if w.hideCapabilities || window != 0 || withheld != tetherv1.Capability_CAPABILITY_UNSPECIFIED {
		sent = proto.Clone(msg).(*tetherv1.ConnectResponse)
		if w.hideCapabilities {
			sent.GetWelcome().Capabilities = nil
		}
		if window != 0 {
			sent.GetWelcome().Window = window
		}
		if withheld != tetherv1.Capability_CAPABILITY_UNSPECIFIED {
			sent.GetWelcome().Capabilities = without(msg.GetWelcome().GetCapabilities(), withheld)
		}
	}
	w.record(func() {
		s.welcome, s.window, s.offered = msg.GetWelcome(), sent.GetWelcome().GetWindow(), sent.GetWelcome().GetCapabilities()
	})
	return sent
}

// without is the broker's capabilities without withheld, listing
// CAPABILITY_CAPABILITIES even when the kit hides capabilities from the
// handler otherwise: a Welcome without it would say nothing of withheld.
func without(broker []tetherv1.Capability, withheld tetherv1.Capability) []tetherv1.Capability {
	caps := []tetherv1.Capability{tetherv1.Capability_CAPABILITY_CAPABILITIES}
	for _, c := range broker {
		if c != withheld && c != tetherv1.Capability_CAPABILITY_CAPABILITIES {
			caps = append(caps, c)
		}
	}
	return caps
}

// renew ends every stream going on with Unavailable, as a broker going
// away does, so that the handler starts a fresh session; from then on the
// handler gets window in the Welcome (0: the broker's), and the broker's
// capabilities.
func (w *wire) renew(window uint32) { w.renewWith(window, tetherv1.Capability_CAPABILITY_UNSPECIFIED) }

// renewWith is renew, the handler's Welcome from then on listing the
// broker's capabilities without withheld (CAPABILITY_UNSPECIFIED: all).
func (w *wire) renewWith(window uint32, withheld tetherv1.Capability) {
	w.record(func() {
		w.window, w.withheld = window, withheld
		for _, s := range w.streams {
			if s.cut != nil && !s.ended {
				s.wasCut = true
				s.cut()
			}
		}
	})
}

// fromHandler forwards the handler's messages until its side ends.
func (w *wire) fromHandler(s *stream, down tetherv1.BrokerService_ConnectServer, up tetherv1.BrokerService_ConnectClient) {
	for {
		msg, err := down.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				_ = up.CloseSend()
			}
			return
		}
		var answered []answer
		w.record(func() {
			if s.first == nil {
				s.first = msg
			}
			switch m := msg.GetMessage().(type) {
			case *tetherv1.ConnectRequest_Hello:
				if s.hello == nil {
					s.hello = m.Hello
				}
			case *tetherv1.ConnectRequest_Ack:
				answered = s.takeAckLocked(m.Ack, answered)
			case *tetherv1.ConnectRequest_AckBatch:
				// Its acks one by one, as the broker takes them ([ack.batch]).
				if !s.batchesOfferedLocked() {
					s.unofferedBatches++
				}
				for _, a := range m.AckBatch.GetAcks() {
					answered = s.takeAckLocked(a, answered)
				}
			case *tetherv1.ConnectRequest_DaemonExited:
				s.exits = append(s.exits, m.DaemonExited)
			case *tetherv1.ConnectRequest_Goodbye:
				s.goodbye = time.Now()
			}
		})
		w.mu.Lock()
		before, goodbye := w.beforeAck, w.onGoodbye
		w.mu.Unlock()
		for _, an := range answered {
			if an.d != nil && before != nil {
				before(an.d, an.a)
			}
		}
		if msg.GetGoodbye() != nil && goodbye != nil {
			goodbye(s)
		}
		if w.hideCapabilities && msg.GetHello() != nil {
			msg = proto.Clone(msg).(*tetherv1.ConnectRequest)
			msg.GetHello().Capabilities = nil
		}
		if err := up.Send(msg); err != nil {
			return
		}
	}
}

// refuse records the handler's first message and ends the stream with st.
func (w *wire) refuse(s *stream, down tetherv1.BrokerService_ConnectServer, st *status.Status) error {
	if msg, err := down.Recv(); err == nil {
		w.record(func() { s.first, s.hello = msg, msg.GetHello() })
	}
	w.record(func() { s.end(st) })
	return st.Err()
}

// answer is an ack and the delivery of the stream it answers (nil when the
// stream did not carry it).
type answer struct {
	d *tetherv1.Delivery
	a *tetherv1.Ack
}

// takeAckLocked records a, the first for its delivery or an extra one, and
// appends it to answered.
func (s *stream) takeAckLocked(a *tetherv1.Ack, answered []answer) []answer {
	d := s.deliveryLocked(a.GetDeliveryId())
	if _, twice := s.acks[a.GetDeliveryId()]; twice || d == nil {
		s.extraAcks = append(s.extraAcks, a)
	} else {
		s.acks[a.GetDeliveryId()] = ackAt{a, time.Now()}
	}
	return append(answered, answer{d, a})
}

// batchesOfferedLocked tells whether the handler may send AckBatch on s:
// its Hello and the Welcome it got both list CAPABILITY_ACK_BATCH.
func (s *stream) batchesOfferedLocked() bool {
	return slices.Contains(s.hello.GetCapabilities(), tetherv1.Capability_CAPABILITY_ACK_BATCH) &&
		slices.Contains(s.offered, tetherv1.Capability_CAPABILITY_ACK_BATCH)
}

func (s *stream) deliveryLocked(id string) *tetherv1.Delivery {
	for _, d := range s.deliveries {
		if d.d.GetId() == id {
			return d.d
		}
	}
	return nil
}

// record changes what was seen, under the lock, and wakes the waiters.
func (w *wire) record(change func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	change()
	close(w.changed)
	w.changed = make(chan struct{})
}

// await waits until cond, evaluated under the lock at every record, holds,
// or until timeout; it reports whether cond held.
func (w *wire) await(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		ok, changed := cond(), w.changed
		w.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// exchanges are the deliveries of kind for the object named name, with
// their acks (zero when not yet answered), in the order sent, over every
// stream; w.mu must be held.
func (w *wire) exchangesLocked(name string, kind tetherv1.DeliveryKind) (ds []delivery, acks []ackAt) {
	for _, s := range w.streams {
		for _, d := range s.deliveries {
			if d.d.GetKind() == kind && d.d.GetRef().GetName() == name {
				ds = append(ds, d)
				acks = append(acks, s.acks[d.d.GetId()])
			}
		}
	}
	return ds, acks
}
