package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/limit"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/resource"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Attacher takes validated instances: the dispatcher.
type Attacher interface {
	Attach(ctx context.Context, in *Instance, hello *tetherv1.Hello, bindings []*binding.Binding) (Attachment, error)
}

// ErrNotLeading is returned by an Attacher on a broker replica that does
// not lead; the stream ends with Unavailable, which tells handlers to retry
// (through the Service, on the leader).
var ErrNotLeading = errors.New("this broker replica is not the leader; retry")

// ErrTryLater wraps an Attacher's refusal that a retry fixes: the broker is
// still starting, or other instances of the handler, with other bindings,
// are still connected (a rollout to new bindings). The instance gets
// Unavailable, which SDKs retry with backoff; permanent codes are kept for
// what a retry cannot fix.
var ErrTryLater = errors.New("not now; retry")

// Attachment is what Attach grants an instance.
type Attachment struct {
	// Detach is called once, when the session ends.
	Detach func()
	// Grace and AbsentReleaseAfter apply to the handler; Welcome says them.
	Grace, AbsentReleaseAfter time.Duration
	// ReviewsOnly: a replica that does not lead took the instance for
	// admission reviews only (tetherv1.Capability_CAPABILITY_EVERY_REPLICA):
	// Welcome says so, and no index is streamed. Ended closes when the
	// replica comes to lead; the session then ends with Unavailable, for the
	// instance to reconnect for a full one. nil: never.
	ReviewsOnly bool
	Ended       <-chan struct{}
}

// Options configure a Server. Attacher and Resolver are required.
type Options struct {
	Log      hclog.Logger
	Attacher Attacher
	Resolver binding.Resolver
	// Defaults fill in what bindings leave unset.
	Defaults binding.Defaults
	// Supported lists the binding kinds served; nil means LifecycleKinds.
	Supported map[binding.Kind]bool
	// ExcludedNamespaces are the namespaces no webhook intercepts; a Hello
	// whose validate or mutate binding names one is refused with
	// InvalidArgument (binding.RefuseExcludedNamespaces).
	ExcludedNamespaces []string
	// HelloTimeout bounds the wait for Hello (default 10 s).
	HelloTimeout time.Duration
	// DefaultWindow is used when Hello asks for none (default 16);
	// MaxWindow caps what Hello may ask for (default 1024).
	DefaultWindow, MaxWindow int
	// MaxBindings caps the bindings of one Hello (default 256).
	MaxBindings int
	// MaxInstances caps the instances of one handler connected at once
	// (default 256); one more is told ResourceExhausted, which SDKs retry.
	MaxInstances int
	// Authorize checks that the stream's identity may be the handler, with
	// that priority (above 0 takes over the handler's work), and have the
	// bindings; nil checks nothing (insecure mode). An error wrapping
	// auth.ErrDenied ends the stream with PermissionDenied naming the Hello
	// field. It is asked at Hello and then every RecheckEvery (default
	// DefaultRecheckEvery) while the session lasts: rights withdrawn end it.
	Authorize    func(ctx context.Context, handler string, priority int32, bindings []*binding.Binding) error
	RecheckEvery time.Duration
	// AuthorizeName checks the rights of the Hello's handler name and
	// priority alone, before its bindings are compiled, so that an identity
	// not granted the name costs no compile; its errors are Authorize's.
	// nil checks nothing.
	AuthorizeName func(ctx context.Context, handler string, priority int32) error
	// Admitted is called once a Hello's rights are granted, before its
	// instance is attached and so before anything is held for it: the
	// broker widens its uninstall grant there. nil does nothing.
	Admitted func(ctx context.Context)
	// MaxHellosPerIdentity bounds the Hellos of one identity being checked
	// and compiled at once (default DefaultMaxHellosPerIdentity), and
	// MaxHellos those of all (default DefaultMaxHellos); a Hello past
	// either is told ResourceExhausted, which SDKs retry, before any review
	// or compile.
	MaxHellosPerIdentity, MaxHellos int
	// Index streams an index binding's objects to the instance (package
	// index) until ctx ends; nil refuses index bindings as unsupported.
	Index func(ctx context.Context, b *binding.Binding, send func(*tetherv1.Indexed) error) error
	// Version is the broker's build version, sent in Welcome.
	Version string
	// Metrics counts sessions; nil counts nothing.
	Metrics *metrics.Metrics
	// Fence is asked as the sender writes each message with a delivery
	// that is not an admission review: an error keeps those deliveries
	// unsent, and their Delivers return it wrapped in ErrFenced. The leader fences with its tenure, so that a replica that
	// may no longer lead sends no lifecycle work (a review needs no
	// leadership). nil sends every delivery.
	Fence func() error
	// BatchLinger is how long the sender waits with a lifecycle delivery
	// alone in flight to an instance that takes DeliveryBatch, for more to
	// come and go with it (default DefaultBatchLinger; negative: none, only
	// what waits already goes with it). An admission review never waits,
	// and ends the wait of those it joins.
	BatchLinger time.Duration
}

// The default bounds on Hellos under way: enough for a Deployment's
// instances to reconnect together, too few for one identity to spend the
// broker's review budget.
const (
	DefaultMaxHellosPerIdentity = 8
	DefaultMaxHellos            = 64
)

// The defaults of a Hello's wait and an instance's window.
const (
	DefaultHelloTimeout = 10 * time.Second
	DefaultWindow       = 16
	DefaultMaxWindow    = 1024
)

// DefaultBatchLinger is Options.BatchLinger's default: short against an
// API server's round trip, long enough that a handler sent a few hundred
// changes a second takes two or more in one read (docs/bench.md).
const DefaultBatchLinger = 5 * time.Millisecond

// DefaultRecheckEvery is how often a session's rights are asked again when
// Options say nothing; the broker looks at absent handlers' identities as
// often.
const DefaultRecheckEvery = 30 * time.Second

// LifecycleKinds are the kinds the dispatcher serves: everything but
// admission.
var LifecycleKinds = map[binding.Kind]bool{
	binding.Create: true, binding.Update: true, binding.Delete: true,
	binding.Resume: true, binding.Field: true, binding.Event: true,
	binding.Timer: true, binding.Daemon: true, binding.Index: true,
}

// AllKinds are LifecycleKinds and admission: the kinds of a broker that
// serves webhooks.
var AllKinds = map[binding.Kind]bool{
	binding.Create: true, binding.Update: true, binding.Delete: true,
	binding.Resume: true, binding.Field: true, binding.Event: true,
	binding.Timer: true, binding.Daemon: true, binding.Validate: true, binding.Mutate: true, binding.Index: true,
}

// Server implements tetherv1.BrokerServiceServer.
type Server struct {
	tetherv1.UnimplementedBrokerServiceServer
	opts Options
	log  hclog.Logger

	stopping chan struct{}
	stopOnce sync.Once

	offered Capabilities // in every Welcome

	instances *limit.Counter // connected, per handler
	hellos    *limit.Counter // under way, per identity
	allHellos *limit.Counter // under way, in all, under ""
}

// NewServer returns a Server.
func NewServer(opts Options) *Server {
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Supported == nil {
		opts.Supported = LifecycleKinds
	}
	if opts.Index == nil && opts.Supported[binding.Index] {
		opts.Supported = maps.Clone(opts.Supported)
		delete(opts.Supported, binding.Index)
	}
	if opts.HelloTimeout <= 0 {
		opts.HelloTimeout = DefaultHelloTimeout
	}
	switch {
	case opts.BatchLinger == 0:
		opts.BatchLinger = DefaultBatchLinger
	case opts.BatchLinger < 0:
		opts.BatchLinger = 0
	}
	if opts.DefaultWindow <= 0 {
		opts.DefaultWindow = DefaultWindow
	}
	if opts.MaxWindow <= 0 {
		opts.MaxWindow = DefaultMaxWindow
	}
	if opts.MaxBindings <= 0 {
		opts.MaxBindings = 256
	}
	if opts.RecheckEvery <= 0 {
		opts.RecheckEvery = DefaultRecheckEvery
	}
	if opts.MaxInstances <= 0 {
		opts.MaxInstances = 256
	}
	if opts.MaxHellosPerIdentity <= 0 {
		opts.MaxHellosPerIdentity = DefaultMaxHellosPerIdentity
	}
	if opts.MaxHellos <= 0 {
		opts.MaxHellos = DefaultMaxHellos
	}
	return &Server{
		opts: opts, log: opts.Log, stopping: make(chan struct{}), offered: offered(opts.Supported),
		instances: &limit.Counter{PerKey: opts.MaxInstances},
		hellos:    &limit.Counter{PerKey: opts.MaxHellosPerIdentity},
		allHellos: &limit.Counter{PerKey: opts.MaxHellos},
	}
}

// Shutdown ends every stream at once with Unavailable, so handlers reconnect
// (to another replica) instead of waiting on a broker that is going away.
func (s *Server) Shutdown() {
	s.stopOnce.Do(func() { close(s.stopping) })
}

// Connect serves one handler instance.
func (s *Server) Connect(stream tetherv1.BrokerService_ConnectServer) (err error) {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()

	hello, err := s.awaitHello(ctx, stream)
	if err != nil {
		return err
	}
	welcomed := false
	defer func() { s.logRefusal(hello, welcomed, err) }()
	window, err := s.checkHello(hello)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	bindings, err := s.signIn(ctx, hello)
	if err != nil {
		return err
	}
	if !s.instances.Acquire(hello.GetHandler()) {
		return status.Errorf(codes.ResourceExhausted, "handler %q has %d instances connected, the most this broker takes; retry later", hello.GetHandler(), s.opts.MaxInstances)
	}
	defer s.instances.Release(hello.GetHandler())
	withdrawn := s.recheck(ctx, hello.GetHandler(), hello.GetPriority(), bindings)
	in := newInstance(hello.GetHandler(), hello.GetInstanceId(), newSessionID(), hello.GetPriority(), window,
		slices.ContainsFunc(bindings, func(b *binding.Binding) bool { return b.Kind.IsAdmission() }))
	in.fence, in.linger = s.opts.Fence, s.opts.BatchLinger
	in.Capabilities = Capabilities(hello.GetCapabilities())
	if u, ok := auth.User(ctx); ok {
		in.User = &u
	}
	log := s.log.With("handler", in.Handler, "instance", in.ID, "session", in.SessionID)
	att, err := s.opts.Attacher.Attach(ctx, in, hello, bindings)
	if errors.Is(err, ErrNotLeading) || errors.Is(err, ErrTryLater) {
		return status.Error(codes.Unavailable, fmt.Sprintf("attaching handler %q: %v", in.Handler, err))
	}
	if err != nil {
		return status.Error(codes.FailedPrecondition, fmt.Sprintf("attaching handler %q: %v", in.Handler, err))
	}
	s.opts.Metrics.Presence().Opened(in.Handler)
	recvErr := make(chan error, 1)
	var recvDone chan struct{} // nil until receive runs
	defer func() {
		if recvDone != nil && stream.Context().Err() != nil {
			// The stream ended under us (gRPC ends it at once on a message
			// over the size limit): let receive say why before the
			// instance's deliveries learn that it is gone.
			<-recvDone
		}
		close(in.done)
		att.Detach()
		s.opts.Metrics.Presence().Closed(in.Handler)
		log.Info("handler instance disconnected")
	}()

	welcome := s.welcome(in, window, att, bindings)
	if err := stream.Send(&tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Welcome{Welcome: welcome}}); err != nil {
		return err
	}
	welcomed = true
	log.Info("handler instance connected", "bindings", len(bindings), "window", window, "priority", in.Priority,
		"sdk", hello.GetSdk(), "capabilities", capabilityNames(in.Capabilities), "reviews_only", att.ReviewsOnly)

	if !att.ReviewsOnly {
		s.streamIndexes(ctx, in, bindings, log)
	}
	recvDone = make(chan struct{})
	go func() {
		defer close(recvDone)
		recvErr <- s.receive(ctx, stream, in, log)
	}()
	return s.serve(ctx, stream, in, ended{withdrawn, att.Ended}, recvErr, log)
}

// logRefusal logs a Hello refused (err, before Welcome), so that a
// handler instance retrying (Unavailable, ResourceExhausted: not now) or
// rejected is seen from the broker's side too; an instance that went away
// (Canceled) is not.
func (s *Server) logRefusal(hello *tetherv1.Hello, welcomed bool, err error) {
	if welcomed || err == nil {
		return
	}
	st := status.Convert(err)
	if st.Code() == codes.Canceled {
		return
	}
	s.log.Info("refused a handler instance's Hello", "handler", hello.GetHandler(), "instance", hello.GetInstanceId(),
		"code", st.Code().String(), "reason", st.Message())
}

// welcome is the Welcome of instance in: its session, window and grace,
// the broker's capabilities, and each binding's resource as resolved.
func (s *Server) welcome(in *Instance, window int, att Attachment, bindings []*binding.Binding) *tetherv1.Welcome {
	w := &tetherv1.Welcome{
		SessionId: in.SessionID, Window: uint32(window), BrokerVersion: s.opts.Version,
		Grace: durationpb.New(att.Grace), AbsentReleaseAfter: durationpb.New(att.AbsentReleaseAfter),
		Capabilities: s.offered, ReviewsOnly: att.ReviewsOnly,
	}
	for _, b := range bindings {
		w.Resources = append(w.Resources, &tetherv1.Resource{
			Group: b.Resource.Group, Version: b.Resource.Version, Resource: b.Resource.Resource,
			Kind: b.Resource.Kind, Namespaced: b.Resource.Namespaced,
		})
	}
	return w
}

// ended are what ends a session from the broker's side besides its
// stopping: rights withdrawn, and a reviews-only session's replica coming
// to lead.
type ended struct {
	withdrawn <-chan error
	leading   <-chan struct{}
}

// serve sends the instance its messages until the session ends: drained
// after a Goodbye, the broker stopping, rights withdrawn, a reviews-only
// session's replica coming to lead, the instance's side closed or failed,
// or the stream's context done.
func (s *Server) serve(ctx context.Context, stream tetherv1.BrokerService_ConnectServer, in *Instance,
	end ended, recvErr <-chan error, log hclog.Logger) error {
	for {
		done, change := in.win.drained()
		if done {
			log.Info("handler instance said goodbye and has nothing in flight; ending its stream")
			return nil
		}
		select {
		case <-change:
		case <-s.stopping:
			return status.Error(codes.Unavailable, "the broker is shutting down; reconnect")
		case err := <-end.withdrawn:
			log.Warn("handler instance lost its rights; ending its session", "error", err)
			return status.Error(codes.PermissionDenied, "rights withdrawn: "+err.Error())
		case <-end.leading:
			log.Info("this replica leads now; ending the reviews-only session for the instance to reconnect")
			return status.Error(codes.Unavailable, "this broker replica leads now; reconnect for a full session")
		case msg := <-in.send:
			if err := in.write(stream, msg); err != nil {
				return err
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil // the instance closed its side: a clean end
			}
			return err
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// signIn checks the Hello's rights and compiles its bindings, within the
// bounds on Hellos under way, and the name's rights before anything else:
// an identity that may not be the handler costs no compile, and no review
// while its denial is cached. Its errors are gRPC statuses.
func (s *Server) signIn(ctx context.Context, hello *tetherv1.Hello) ([]*binding.Binding, error) {
	done, err := s.beginHello(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if s.opts.AuthorizeName != nil {
		if err := s.opts.AuthorizeName(ctx, hello.GetHandler(), hello.GetPriority()); err != nil {
			return nil, authStatus(err)
		}
	}
	bindings, err := binding.Compile(ctx, hello.GetBindings(), s.opts.Resolver, s.opts.Defaults, s.opts.Supported)
	if err == nil {
		err = binding.RefuseExcludedNamespaces(bindings, s.opts.ExcludedNamespaces)
	}
	if err != nil {
		code := codes.InvalidArgument
		switch {
		case errors.Is(err, binding.ErrUnsupported):
			code = codes.Unimplemented
		case errors.Is(err, resource.ErrUnavailable):
			code = codes.Unavailable // no verdict on the Hello: the handler retries
		}
		return nil, status.Error(code, err.Error())
	}
	if s.opts.Authorize != nil {
		if err := s.opts.Authorize(ctx, hello.GetHandler(), hello.GetPriority(), bindings); err != nil {
			return nil, authStatus(err)
		}
	}
	if s.opts.Admitted != nil {
		s.opts.Admitted(ctx)
	}
	return bindings, nil
}

// beginHello counts a Hello under way, for its identity (none in insecure
// mode) and in all, or refuses it with ResourceExhausted; done uncounts it.
func (s *Server) beginHello(ctx context.Context) (done func(), err error) {
	if !s.allHellos.Acquire("") {
		s.opts.Metrics.SignIn().Throttled(metrics.ThrottledBroker)
		return nil, status.Errorf(codes.ResourceExhausted, "the broker has %d Hellos under way, the most it takes; retry", s.opts.MaxHellos)
	}
	u, ok := auth.User(ctx)
	if !ok {
		return func() { s.allHellos.Release("") }, nil
	}
	if !s.hellos.Acquire(u.Username) {
		s.allHellos.Release("")
		s.opts.Metrics.SignIn().Throttled(metrics.ThrottledIdentity)
		return nil, status.Errorf(codes.ResourceExhausted, "%s has %d Hellos under way, the most one identity may; retry", u.Username, s.opts.MaxHellosPerIdentity)
	}
	return func() {
		s.hellos.Release(u.Username)
		s.allHellos.Release("")
	}, nil
}

// authStatus is the status of an Authorize error: PermissionDenied for a
// right missing, Unavailable when there was no verdict.
func authStatus(err error) error {
	if errors.Is(err, auth.ErrDenied) {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

// recheck asks Authorize again every RecheckEvery until ctx ends, and sends
// on the returned channel the first denial. An error that says nothing
// about the rights (the API server unreachable) keeps the session.
func (s *Server) recheck(ctx context.Context, handler string, priority int32, bindings []*binding.Binding) <-chan error {
	withdrawn := make(chan error, 1)
	if s.opts.Authorize == nil {
		return withdrawn
	}
	go func() {
		t := time.NewTicker(s.opts.RecheckEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := s.opts.Authorize(ctx, handler, priority, bindings)
			if errors.Is(err, auth.ErrDenied) {
				withdrawn <- err
				return
			}
			if err != nil && ctx.Err() == nil {
				s.log.Warn("cannot recheck a handler's rights; the session goes on", "handler", handler, "error", err)
			}
		}
	}()
	return withdrawn
}

func (s *Server) awaitHello(ctx context.Context, stream tetherv1.BrokerService_ConnectServer) (*tetherv1.Hello, error) {
	type result struct {
		msg *tetherv1.ConnectRequest
		err error
	}
	c := make(chan result, 1)
	go func() {
		msg, err := stream.Recv()
		c <- result{msg, err}
	}()
	timer := time.NewTimer(s.opts.HelloTimeout)
	defer timer.Stop()
	select {
	case r := <-c:
		if r.err != nil {
			return nil, r.err
		}
		if r.msg.GetHello() == nil {
			return nil, status.Error(codes.InvalidArgument, "the first message must be hello")
		}
		return r.msg.GetHello(), nil
	case <-timer.C:
		// Returning ends the stream, which also ends the pending Recv.
		return nil, status.Errorf(codes.DeadlineExceeded, "no hello within %v", s.opts.HelloTimeout)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (s *Server) checkHello(h *tetherv1.Hello) (window int, err error) {
	if err := binding.ValidateName(h.GetHandler()); err != nil {
		return 0, fmt.Errorf("handler: %w", err)
	}
	if h.GetInstanceId() == "" || len(h.GetInstanceId()) > 253 {
		return 0, errors.New("instance_id: must be 1 to 253 characters")
	}
	if v := h.GetProtocolVersion(); v != "" && v != "v1" {
		return 0, fmt.Errorf("protocol_version: %q is not spoken here (want v1)", v)
	}
	if p := h.GetPriority(); p < 0 || p > tetherv1.MaxPriority {
		return 0, fmt.Errorf("priority: %d is out of range 0..%d (0, the default, for in-cluster instances; above 0 takes over the handler's work while connected)", p, tetherv1.MaxPriority)
	}
	if n := len(h.GetBindings()); n > s.opts.MaxBindings {
		return 0, fmt.Errorf("bindings: %d is more than the %d allowed", n, s.opts.MaxBindings)
	}
	namespaces := 0
	for _, b := range h.GetBindings() {
		namespaces += len(b.GetNamespaces())
	}
	if namespaces > tetherv1.MaxHelloNamespaces {
		return 0, fmt.Errorf("bindings: %d namespaces in all, more than the %d allowed; bind cluster-wide and narrow with a label selector or a when condition", namespaces, tetherv1.MaxHelloNamespaces)
	}
	window = int(h.GetWindow())
	if window == 0 {
		window = s.opts.DefaultWindow
	}
	return min(window, s.opts.MaxWindow), nil
}

// receive reads acks, flow control and goodbye until the stream ends.
func (s *Server) receive(ctx context.Context, stream tetherv1.BrokerService_ConnectServer, in *Instance, log hclog.Logger) error {
	for {
		msg, err := stream.Recv()
		if status.Code(err) == codes.ResourceExhausted {
			// A message over the size limit: what the instance was
			// answering would end its next session the same way.
			log.Warn("handler instance sent a message over the size limit; ending its session", "error", err)
			in.broke(err)
		}
		if err != nil {
			return err
		}
		switch m := msg.GetMessage().(type) {
		case *tetherv1.ConnectRequest_Ack:
			takeAck(in, m.Ack, log)
		case *tetherv1.ConnectRequest_AckBatch:
			if err := takeAckBatch(in, m.AckBatch, log); err != nil {
				log.Warn("handler instance broke the protocol; ending its session", "error", err)
				return err
			}
		case *tetherv1.ConnectRequest_FlowControl:
			w := int(m.FlowControl.GetWindow())
			if w <= 0 {
				w = s.opts.DefaultWindow
			}
			in.win.resize(min(w, s.opts.MaxWindow))
		case *tetherv1.ConnectRequest_Goodbye:
			log.Info("handler instance says goodbye", "reason", m.Goodbye.GetReason())
			in.win.leave()
		case *tetherv1.ConnectRequest_DaemonExited:
			in.daemonExited(m.DaemonExited)
		case *tetherv1.ConnectRequest_Hello:
			return status.Error(codes.InvalidArgument, "hello may be sent only once")
		default:
			log.Warn("unknown message ignored")
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func newSessionID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
