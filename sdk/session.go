package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Session timing that is not configurable.
const (
	welcomeTimeout = 30 * time.Second // the broker answers Hello well within this
	closeTimeout   = 5 * time.Second  // for the goodbye and for functions to notice cancellation
)

// Causes of a handler function's context ending, for context.Cause.
var (
	// ErrCancelled: the broker withdrew the delivery (the object was
	// deleted, or this instance no longer owns it).
	ErrCancelled = errors.New("delivery cancelled by the broker")
	// ErrShuttingDown: the handler is stopping and the drain timeout ran
	// out; a daemon sees it as soon as the handler starts stopping.
	ErrShuttingDown = errors.New("handler shutting down")
	// ErrSessionEnded: the connection to the broker was lost; the broker
	// will send the delivery again (and start the daemon again).
	ErrSessionEnded = errors.New("session with the broker ended")
	// ErrDaemonStopped: the broker stopped the daemon (the object was
	// deleted or no longer matches, or it moves to another instance).
	ErrDaemonStopped = errors.New("daemon stopped by the broker")
)

// outgoing is one thing for the sender goroutine to do.
type outgoing struct {
	req       *tetherv1.ConnectRequest
	closeSend bool
}

// call is one delivery being handled.
type call struct {
	d       *tetherv1.Delivery
	b       *binding
	kind    EventKind
	ctx     context.Context
	cancel  context.CancelCauseFunc
	release context.CancelFunc
	log     hclog.Logger
	// span is a daemon stop's, from the stop to the function's return,
	// ended with its ack; nil for other calls, whose span invoke makes.
	span trace.Span
}

type result struct {
	c   *call
	ack *tetherv1.Ack
}

// session is one Connect stream. Its serve loop owns all of the session's
// state; the receiver, the sender and the handler functions talk to it over
// channels, and every channel send also selects on the session's context.
type session struct {
	h      *Handler
	p      *plan
	log    hclog.Logger
	stream tetherv1.BrokerService_ConnectClient
	ctx    context.Context // ends when the stream is torn down
	cancel context.CancelCauseFunc

	inbox   chan *tetherv1.ConnectResponse
	recvErr chan error
	outbox  chan outgoing
	sendErr chan error
	results chan result
	exits   chan *daemon // daemon functions that returned
	idle    chan *call   // runners waiting for a function to run

	window  int
	offered BrokerCapabilities // by this session's Welcome
	// reviewsOnly: a replica that does not lead took the session for
	// admission reviews only (Welcome.reviews_only).
	reviewsOnly bool
	queue       []outgoing       // messages waiting for the sender, in order
	inflight    map[string]*call // by delivery id
	daemons     map[daemonKey]*daemon

	pumps   sync.WaitGroup // receiver and sender
	workers sync.WaitGroup // runners of handler functions
}

// session runs one Connect stream until it ends or ctx is cancelled (then
// after the goodbye). welcomed tells whether the broker accepted the Hello.
// reviewsOnly tells whether the broker took the session for admission
// reviews only (a replica that does not lead, CAPABILITY_EVERY_REPLICA).
func (h *Handler) session(ctx context.Context, client tetherv1.BrokerServiceClient, p *plan, log hclog.Logger) (welcomed, reviewsOnly bool, err error) {
	// The stream outlives ctx so that a stopping handler can still ack and
	// say goodbye; until the broker welcomes us, stopping is immediate.
	sctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stopEarly := context.AfterFunc(ctx, func() { cancel(ErrShuttingDown) })
	defer stopEarly()
	stream, err := client.Connect(sctx)
	if err != nil {
		cancel(ErrSessionEnded)
		return false, false, fmt.Errorf("opening stream: %w", err)
	}
	s := &session{
		h:        h,
		p:        p,
		log:      log,
		stream:   stream,
		ctx:      sctx,
		cancel:   cancel,
		inbox:    make(chan *tetherv1.ConnectResponse),
		recvErr:  make(chan error, 1),
		outbox:   make(chan outgoing),
		sendErr:  make(chan error, 1),
		results:  make(chan result),
		exits:    make(chan *daemon),
		idle:     make(chan *call),
		window:   h.cfg.window,
		inflight: make(map[string]*call),
		daemons:  make(map[daemonKey]*daemon),
	}
	s.pumps.Add(2)
	go s.receive()
	go s.send()
	defer s.teardown()
	s.enqueue(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Hello{Hello: p.hello}})
	welcomed, err = s.serve(ctx, stopEarly)
	return welcomed, s.reviewsOnly, err
}

func (s *session) serve(ctx context.Context, stopEarly func() bool) (welcomed bool, err error) {
	welcomeTimer := time.NewTimer(welcomeTimeout)
	defer welcomeTimer.Stop()
	welcomeC := welcomeTimer.C
	stopping := ctx.Done()
	var drainC <-chan time.Time
	draining := false
	saidGoodbye := false
	for {
		if draining && !saidGoodbye && len(s.daemons) == 0 {
			// Goodbye as soon as no daemon runs here (the broker ends the
			// stream once nothing is in flight, and a daemon must not start
			// elsewhere while this one still runs): the broker then sends
			// nothing new, and gives what arrived meanwhile (answered
			// RETRY) to another instance without counting an attempt.
			s.enqueue(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Goodbye{
				Goodbye: &tetherv1.Goodbye{Reason: "instance shutting down"}}})
			saidGoodbye = true
		}
		if draining && len(s.inflight) == 0 && len(s.daemons) == 0 {
			return true, s.goodbye()
		}
		out, next := s.head()
		select {
		case out <- next:
			s.pop()
		case msg := <-s.inbox:
			if welcomed {
				s.dispatch(msg, draining)
				continue
			}
			w := msg.GetWelcome()
			if w == nil {
				return false, fmt.Errorf("protocol error: broker sent %T before Welcome", msg.GetMessage())
			}
			stopEarly()
			welcomed, welcomeC = true, nil
			s.welcome(w)
		case r := <-s.results:
			s.finish(r)
		case dm := <-s.exits:
			s.daemonReturned(dm)
		case err := <-s.recvErr:
			return welcomed, streamEnded(err)
		case err := <-s.sendErr:
			return welcomed, s.sendFailed(err)
		case <-welcomeC:
			return false, fmt.Errorf("no Welcome from the broker within %s", welcomeTimeout)
		case <-stopping:
			if !welcomed {
				return false, context.Cause(ctx)
			}
			stopping, draining = nil, true
			s.log.Info("stopping: draining deliveries in flight and stopping daemons",
				"in_flight", len(s.inflight), "daemons", len(s.daemons), "timeout", s.h.cfg.drainTimeout)
			for _, dm := range s.daemons {
				dm.stop(ErrShuttingDown)
			}
			t := time.NewTimer(s.h.cfg.drainTimeout)
			defer t.Stop()
			drainC = t.C
		case <-drainC:
			drainC = nil
			s.abandonAll()
		}
	}
}

func (s *session) head() (chan<- outgoing, outgoing) {
	if len(s.queue) == 0 {
		return nil, outgoing{}
	}
	return s.outbox, s.queue[0]
}

func (s *session) pop() {
	s.queue[0] = outgoing{}
	s.queue = s.queue[1:]
}

func (s *session) enqueue(req *tetherv1.ConnectRequest) {
	s.queue = append(s.queue, outgoing{req: req})
}

// ack queues a, or, when a is more than the broker takes in one message
// (sending it would end the session, and the broker would send the same
// delivery again), a FAIL that says so.
func (s *session) ack(a *tetherv1.Ack) {
	req := &tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Ack{Ack: a}}
	if n := proto.Size(req); n > tetherv1.DefaultMaxMessageBytes {
		s.log.Error("the answer is too large for the broker; failing the delivery", "delivery", a.GetDeliveryId(), "bytes", n)
		req.Message = &tetherv1.ConnectRequest_Ack{Ack: &tetherv1.Ack{DeliveryId: a.GetDeliveryId(), Outcome: tetherv1.Outcome_OUTCOME_FAIL,
			Message: fmt.Sprintf("the answer is %d bytes, more than the %d the broker takes in one message: patch less, or keep large state elsewhere", n, tetherv1.DefaultMaxMessageBytes)}}
	}
	s.enqueue(req)
}

func (s *session) welcome(w *tetherv1.Welcome) {
	if n := int(w.GetWindow()); n > 0 && n < s.window {
		s.window = n
	}
	s.log = s.log.With("session", w.GetSessionId())
	s.offered = brokerCapabilities(w)
	s.reviewsOnly = w.GetReviewsOnly()
	if !s.reviewsOnly {
		// A reviews-only session's replica says nothing of the leader's.
		s.h.setBrokerCapabilities(s.offered)
	}
	s.log.Info("connected to broker", "broker_version", w.GetBrokerVersion(), "window", s.window,
		"capabilities", capabilityNames(s.offered), "reviews_only", s.reviewsOnly)
	for i, r := range w.GetResources() {
		if i < len(s.p.hello.Bindings) {
			s.log.Debug("binding resolved", "binding", s.p.hello.Bindings[i].GetId(),
				"group", r.GetGroup(), "version", r.GetVersion(), "resource", r.GetResource(),
				"kind", r.GetKind(), "namespaced", r.GetNamespaced())
		}
	}
}

func (s *session) dispatch(msg *tetherv1.ConnectResponse, draining bool) {
	switch m := msg.GetMessage().(type) {
	case *tetherv1.ConnectResponse_Delivery:
		s.accept(m.Delivery, draining)
	case *tetherv1.ConnectResponse_DeliveryBatch:
		// Each as if it came alone, in order.
		for _, d := range m.DeliveryBatch.GetDeliveries() {
			s.accept(d, draining)
		}
	case *tetherv1.ConnectResponse_Cancel:
		id := m.Cancel.GetDeliveryId()
		c := s.inflight[id]
		if c == nil {
			s.log.Debug("cancel for a delivery not in flight", "delivery", id)
			return
		}
		c.log.Info("delivery cancelled by the broker", "reason", m.Cancel.GetReason())
		c.cancel(fmt.Errorf("%w: %s", ErrCancelled, m.Cancel.GetReason()))
	case *tetherv1.ConnectResponse_Welcome:
		s.log.Warn("ignoring a second Welcome")
	default:
		s.log.Warn("ignoring a message this SDK does not know", "type", fmt.Sprintf("%T", m))
	}
}

// accept starts a delivery, or acks it at once when it cannot run.
func (s *session) accept(d *tetherv1.Delivery, draining bool) {
	id := d.GetId()
	log := newDeliveryLogger(s.log, d)
	if id == "" {
		log.Warn("dropping a delivery without id")
		return
	}
	if s.inflight[id] != nil {
		log.Warn("delivery already in flight; the running attempt will ack it")
		return
	}
	kind, ok := eventKind(d.GetKind())
	if !ok {
		log.Warn("delivery kind not supported by this SDK", "kind", d.GetKind().String())
		s.ack(failAck(id, fmt.Sprintf("delivery kind %s is not supported by this SDK (%s)", d.GetKind(), sdkName())))
		return
	}
	b := s.p.bindings[d.GetBindingId()]
	if b == nil {
		log.Warn("delivery for a binding this instance did not declare")
		s.ack(failAck(id, fmt.Sprintf("binding %q is not declared by this instance", d.GetBindingId())))
		return
	}
	if kind.admission() && b.kind.admission() {
		kind = b.kind // one delivery kind serves validate and mutate bindings
	}
	if kind != b.kind && (kind.special() || b.kind.special()) {
		log.Warn("delivery kind does not fit the binding", "kind", d.GetKind().String(), "binding_kind", b.kind.bindingName())
		s.ack(failAck(id, fmt.Sprintf("binding %q is a %s binding; it does not take %s deliveries",
			b.id, b.kind.bindingName(), d.GetKind())))
		return
	}
	switch d.GetKind() {
	case tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START:
		s.startDaemon(d, b, log, draining)
		return
	case tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_STOP:
		s.stopDaemon(d, b, log, draining)
		return
	}
	if draining {
		s.ack(retryAck(id, ErrShuttingDown.Error()))
		return
	}
	if s.full(id, log) {
		return
	}
	ctx, cancel := context.WithCancelCause(s.ctx)
	release := func() {}
	if deadline := deliveryDeadline(d, b); !deadline.IsZero() {
		if time.Until(deadline) <= 0 {
			log.Warn("delivery deadline already passed on arrival; check clock skew", "deadline", deadline)
		}
		ctx, release = context.WithDeadline(ctx, deadline)
	}
	c := &call{d: d, b: b, kind: kind, ctx: ctx, cancel: cancel, log: log,
		release: func() { release(); cancel(context.Canceled) }}
	s.inflight[id] = c
	s.run(c)
}

// full acks a delivery RETRY when the window is full.
func (s *session) full(id string, log hclog.Logger) bool {
	if len(s.inflight) < s.window {
		return false
	}
	log.Warn("broker exceeded the window; asking it to retry", "window", s.window)
	s.ack(retryAck(id, fmt.Sprintf("handler window of %d exceeded", s.window)))
	return true
}

func deliveryDeadline(d *tetherv1.Delivery, b *binding) time.Time {
	if d.GetDeadline() != nil {
		return d.GetDeadline().AsTime()
	}
	if b.timeout > 0 {
		return time.Now().Add(b.timeout)
	}
	return time.Time{}
}

// work runs c's function on a runner and hands the ack to the serve loop.
func (s *session) work(c *call) {
	defer c.release()
	ack := s.h.invoke(c)
	select {
	case s.results <- result{c: c, ack: ack}:
	case <-s.ctx.Done():
	}
}

func (s *session) finish(r result) {
	id := r.c.d.GetId()
	if s.inflight[id] != r.c {
		return // abandoned at the drain timeout and acked then
	}
	delete(s.inflight, id)
	if len(r.ack.GetEvents()) > 0 && s.offered.Lacks(tetherv1.Capability_CAPABILITY_HANDLER_EVENTS) {
		r.c.log.Warn("the broker does not post handler Events; dropping this delivery's", "events", len(r.ack.GetEvents()))
		r.ack.Events = nil
	}
	s.ack(r.ack)
}

// abandonAll cancels the deliveries still running when the drain timeout
// runs out and acks them RETRY, and leaves behind the daemons that have not
// returned, so the goodbye need not wait for them.
func (s *session) abandonAll() {
	for id, c := range s.inflight {
		c.log.Warn("drain timeout: cancelling delivery")
		c.cancel(ErrShuttingDown)
		delete(s.inflight, id)
		ack := retryAck(id, ErrShuttingDown.Error())
		c.endSpan(ack)
		s.ack(ack)
	}
	for key, dm := range s.daemons {
		dm.log.Warn("drain timeout: daemon has not returned; it ignores its context")
		delete(s.daemons, key)
	}
}

// goodbye sends the queued acks (the Goodbye went when draining began) and
// the end of the request stream, then waits (bounded) for the broker to end
// the stream.
func (s *session) goodbye() error {
	s.queue = append(s.queue, outgoing{closeSend: true})
	timer := time.NewTimer(closeTimeout)
	defer timer.Stop()
	for {
		out, next := s.head()
		select {
		case out <- next:
			s.pop()
		case msg := <-s.inbox:
			for _, d := range tetherv1.DeliveriesOf(msg) {
				s.log.Debug("delivery after goodbye left to the broker", "delivery", d.GetId())
			}
		case <-s.results:
			// a function abandoned at the drain timeout; already acked
		case err := <-s.recvErr:
			if !errors.Is(err, io.EOF) {
				s.log.Debug("stream ended after goodbye", "error", err)
			}
			return nil
		case err := <-s.sendErr:
			s.log.Debug("goodbye not delivered", "error", err)
			return nil
		case <-timer.C:
			s.log.Warn("broker did not close the stream after goodbye", "timeout", closeTimeout)
			return nil
		}
	}
}

// teardown ends the stream, stops the session's daemons and waits for the
// session's goroutines. It waits for daemons up to the drain timeout and
// for handler functions up to closeTimeout: one that ignores its context is
// left behind, its ack unsent.
func (s *session) teardown() {
	s.cancel(ErrSessionEnded)
	s.pumps.Wait()
	s.waitDaemons()
	done := make(chan struct{})
	go func() {
		s.workers.Wait()
		close(done)
	}()
	timer := time.NewTimer(closeTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		s.log.Warn("handler functions still running after the session ended; they ignore their context")
	}
}

// receive forwards broker messages to the serve loop.
func (s *session) receive() {
	defer s.pumps.Done()
	for {
		msg, err := s.stream.Recv()
		if err != nil {
			s.recvErr <- err
			return
		}
		select {
		case s.inbox <- msg:
		case <-s.ctx.Done():
			return
		}
	}
}

// send is the only goroutine that writes to the stream.
func (s *session) send() {
	defer s.pumps.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case o := <-s.outbox:
			var err error
			if o.closeSend {
				err = s.stream.CloseSend()
			} else {
				err = s.stream.Send(o.req)
			}
			if err != nil {
				s.sendErr <- err
				return
			}
			if o.closeSend {
				return
			}
		}
	}
}

// sendFailed turns a send error into the session's error. io.EOF means the
// broker ended the stream; its status then comes from the receiver.
func (s *session) sendFailed(err error) error {
	if !errors.Is(err, io.EOF) {
		return fmt.Errorf("sending to broker: %w", err)
	}
	timer := time.NewTimer(closeTimeout)
	defer timer.Stop()
	for {
		select {
		case <-s.inbox:
			// the session is over; the broker sends this again
		case rerr := <-s.recvErr:
			return streamEnded(rerr)
		case <-timer.C:
			return errors.New("broker ended the stream")
		}
	}
}

func streamEnded(err error) error {
	if errors.Is(err, io.EOF) {
		return errors.New("broker closed the stream")
	}
	return fmt.Errorf("stream ended: %w", err)
}
