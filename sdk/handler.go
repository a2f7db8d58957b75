package sdk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// ConnectTimeout bounds the opening of a connection to the broker: TCP, TLS
// and gRPC's first exchange. A Service can send a dial to a replica that is
// gone, its endpoint not yet removed, where nothing ever answers; gRPC's
// default of 20s made a handler wait that long after a failover. The
// Python SDK's CONNECT_TIMEOUT is the same.
const ConnectTimeout = 5 * time.Second

// Connection settings that are not options.
const (
	keepaliveTime    = 30 * time.Second // the broker permits pings every 10s
	keepaliveTimeout = 10 * time.Second
	maxRecvMsgSize   = 32 << 20 // objects travel whole, with old side and diff
	protocolVersion  = "v1"
)

// Handler is one handler instance: a name, the bindings registered with the
// On* methods, and the options. Register every binding before calling Run.
type Handler struct {
	name string
	cfg  config
	log  hclog.Logger

	mu        sync.Mutex
	bindings  []*binding
	kindCount map[EventKind]int
	running   bool
	offered   BrokerCapabilities // by the last Welcome
}

// New returns a handler named name (a DNS-1123 label of at most 40
// characters, unique in the cluster; it names the finalizer
// tether.dev/<name>). It starts nothing: Run connects.
func New(name string, opts ...Option) *Handler {
	cfg := defaultConfig()
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	err := cfg.finish()
	cfg.errs = nil
	if err != nil {
		cfg.errs = []error{err}
	}
	return &Handler{
		name:      name,
		cfg:       cfg,
		log:       cfg.logger.With("handler", name, "instance", cfg.instanceID),
		kindCount: make(map[EventKind]int),
	}
}

// Name returns the handler name.
func (h *Handler) Name() string { return h.name }

// InstanceID returns the id this instance announces to the broker.
func (h *Handler) InstanceID() string { return h.cfg.instanceID }

// plan is what one Run works with: the bindings as registered when it
// started, and the Hello built from them.
type plan struct {
	bindings map[string]*binding
	hello    *tetherv1.Hello
}

func (h *Handler) prepare() (*plan, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running {
		return nil, errors.New("tether: Run is already running for this handler")
	}
	errs := append([]error(nil), h.cfg.errs...)
	if err := checkName("handler name", h.name); err != nil {
		errs = append(errs, err)
	}
	if len(h.bindings) == 0 {
		errs = append(errs, errors.New("no bindings registered: call OnCreate, OnUpdate, ... before Run"))
	}
	p := &plan{
		bindings: make(map[string]*binding, len(h.bindings)),
		hello: &tetherv1.Hello{
			Handler:         h.name,
			InstanceId:      h.cfg.instanceID,
			Window:          uint32(h.cfg.window),
			Priority:        h.cfg.priority,
			ProtocolVersion: protocolVersion,
			Sdk:             sdkName(),
			Capabilities:    capabilities,
		},
	}
	if g := h.cfg.grace; g != nil {
		p.hello.Grace = durationpb.New(*g)
	}
	if a := h.cfg.absentAfter; a != nil {
		p.hello.AbsentReleaseAfter = durationpb.New(*a)
	}
	for _, b := range h.bindings {
		if err := b.check(); err != nil {
			errs = append(errs, err)
		}
		if _, dup := p.bindings[b.id]; dup {
			errs = append(errs, fmt.Errorf("binding %q: id used twice", b.id))
		}
		p.bindings[b.id] = b
		p.hello.Bindings = append(p.hello.Bindings, b.proto())
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("tether: invalid configuration of handler %q: %w", h.name, err)
	}
	h.running = true
	return p, nil
}

// Run connects to the broker at addr (a gRPC target such as
// "tether-broker.tether-system.svc:7443"), announces the bindings and handles
// deliveries until ctx is cancelled. Lost connections are re-established
// with backoff, forever. When ctx is cancelled Run stops taking deliveries,
// lets those in flight finish (up to the drain timeout), says goodbye to the
// broker and returns nil.
//
// A handler with validate or mutate bindings whose addr yields several
// broker replicas (every A and AAAA record of a DNS name such as a headless
// Service's, or each address of a RoundRobin dialer) keeps one session to
// each, looked up again every ResolveEvery and whenever a session ends, and
// lists CAPABILITY_EVERY_REPLICA: any replica the API server calls then has
// an instance to answer the review, and no review waits for a leader.
// Deliveries from every session go to the same functions; lifecycle
// deliveries, timers and daemons come only from the leader's. Each
// session dials its replica's address as looked up, without resolving the
// name again, and TLS verifies the name in addr. A name with one address
// when Run starts (a ClusterIP Service such as tether-broker's) keeps one
// session, as before, for the life of Run.
//
// Run returns an error at once for an invalid configuration, and when the
// broker rejects the handler (a bad binding, a missing permission, a bad
// token): that error is a *RejectedError carrying the broker's message.
func (h *Handler) Run(ctx context.Context, addr string) error {
	p, err := h.prepare()
	if err != nil {
		return err
	}
	defer func() {
		h.mu.Lock()
		h.running = false
		h.mu.Unlock()
	}()
	if ctx.Err() != nil {
		return nil
	}
	if set := h.replicaSet(ctx, addr, p); set != nil {
		return set.run(ctx)
	}
	return h.connectLoop(ctx, addr, p, nil, h.log.With("broker", addr), nil)
}

// connectLoop keeps a session with the broker at addr until ctx ends, or
// the broker rejects the handler. pinned, when set, is the one replica of
// several that every connection goes to, by its address (replicas.go);
// ended, when set, is told each time a session ends.
func (h *Handler) connectLoop(ctx context.Context, addr string, p *plan, pinned *replicaAddr, log hclog.Logger, ended func()) error {
	bo := backoff{min: h.cfg.backoffMin, max: h.cfg.backoffMax}
	for {
		// A new connection for every session: behind a Service, the next
		// connection may reach another broker replica (the leader), where the
		// old one would keep reaching a follower that refuses.
		conn, err := grpc.NewClient(pinned.target(addr), h.dialOptions(pinned)...)
		if err != nil {
			return fmt.Errorf("tether: broker address %q: %w", addr, err)
		}
		welcomed, reviewsOnly, err := h.session(ctx, tetherv1.NewBrokerServiceClient(conn), p, log)
		conn.Close()
		if ctx.Err() != nil {
			log.Info("handler stopped")
			return nil
		}
		if rej := rejection(h.name, err); rej != nil && !welcomed {
			log.Error("broker rejected the handler", "code", rej.Code, "message", rej.Message)
			return rej
		}
		if ended != nil {
			ended()
		}
		if welcomed {
			bo.reset()
		}
		delay := bo.next()
		if reviewsOnly && status.Code(err) == codes.Unavailable {
			// The replica leads now: the full session is to be had at once.
			delay = 0
		}
		log.Warn("connection to broker lost; reconnecting", "error", err, "delay", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			log.Info("handler stopped")
			return nil
		case <-t.C:
		}
	}
}

// RejectedError is what Run returns when the broker refuses the handler: a
// binding it cannot serve (unknown resource, bad selector, CEL that does not
// compile), a missing permission, a bad token, an unsupported protocol.
// Trying again cannot help, so Run does not.
type RejectedError struct {
	Handler string
	// Code is the gRPC status code name, e.g. "InvalidArgument".
	Code string
	// Message is the broker's explanation; it names the bad field.
	Message string
	err     error
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("tether: broker rejected handler %q: %s: %s", e.Handler, e.Code, e.Message)
}

// Unwrap returns the underlying gRPC status error.
func (e *RejectedError) Unwrap() error { return e.err }

// rejection returns a *RejectedError when err carries a status that means
// the handler is misconfigured, and nil otherwise.
func rejection(handler string, err error) *RejectedError {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) || se.GRPCStatus() == nil {
		return nil
	}
	st := se.GRPCStatus()
	switch st.Code() {
	case codes.InvalidArgument, codes.Unimplemented, codes.PermissionDenied,
		codes.Unauthenticated, codes.FailedPrecondition:
		return &RejectedError{Handler: handler, Code: st.Code().String(), Message: st.Message(), err: err}
	}
	return nil
}

// dialOptions are a connection's options; pinned, when set, dials its
// replica instead of the configured dialer, and names the broker as addr
// did (for TLS and :authority).
func (h *Handler) dialOptions(pinned *replicaAddr) []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvMsgSize)),
		grpc.WithUserAgent(sdkName()),
		// The connection's own redial backoff follows the session backoff.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: grpcbackoff.Config{
				BaseDelay: h.cfg.backoffMin, Multiplier: 2, Jitter: 0.2, MaxDelay: h.cfg.backoffMax,
			},
			MinConnectTimeout: ConnectTimeout,
		}),
	}
	if pinned != nil {
		opts = append(opts, pinned.dialOptions()...)
	} else if d := h.cfg.dialer; d != nil {
		opts = append(opts, grpc.WithContextDialer(d))
	}
	if h.cfg.insecure {
		if h.cfg.token != "" || len(h.cfg.tokenFiles) > 0 {
			h.log.Warn("insecure connection: the configured token is not sent")
		}
		return append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	tlsConfig := h.cfg.tlsConfig
	if tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	creds := credentials.NewTLS(tlsConfig)
	if h.cfg.tlsCAFile != "" {
		creds = newCAFileCredentials(tlsConfig, h.cfg.tlsCAFile)
	}
	return append(opts,
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(bearerToken{token: h.cfg.token, files: h.cfg.tokenFiles}),
	)
}

// bearerToken sends "authorization: Bearer <token>" with every stream,
// reading the token file anew each time: the first of files that exists
// (the defaults are DefaultTokenPaths), or the token itself when none are
// given.
type bearerToken struct {
	token string
	files []string
}

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, file := b.token, ""
	for i, f := range b.files {
		raw, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) && i < len(b.files)-1 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading token: %w", err)
		}
		tok, file = strings.TrimSpace(string(raw)), f
		break
	}
	if tok == "" {
		return nil, fmt.Errorf("token file %s is empty", file)
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return true }

// backoff is exponential with jitter: each delay is drawn from the upper
// half of the current step, so that instances do not reconnect in lockstep.
type backoff struct {
	min, max time.Duration
	step     time.Duration
}

func (b *backoff) reset() { b.step = 0 }

func (b *backoff) next() time.Duration {
	switch {
	case b.step == 0:
		b.step = b.min
	case b.step < b.max/2:
		b.step *= 2
	default:
		b.step = b.max
	}
	half := b.step / 2
	return half + rand.N(b.step-half+1)
}
