package broker

import (
	"context"
	"crypto/tls"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/tether-dev/tether/broker/admission"
	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/certs"
	"github.com/tether-dev/tether/broker/dispatch"
	"github.com/tether-dev/tether/broker/index"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/kube"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/resource"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// parts are what one Start builds before it runs anything: the clients,
// the watching, dispatching and serving components, and what an uninstall
// needs. run starts them in order (run.go).
type parts struct {
	*Broker
	cfg *rest.Config
	// wcfg is cfg without a client-side rate limit: the dispatcher paces
	// its writes itself, without holding a worker while a write waits.
	wcfg   *rest.Config
	kube   kube.Interface
	writer dynamic.Interface // the dispatcher's and an uninstall's writes
	store  *presence.Store

	recorder      *eventRecorder
	handlerEvents *handlerEvents
	informers     *informer.Registry
	dispatcher    *dispatch.Manager
	sessions      *session.Server
	srv           *grpc.Server
	healthSrv     *health.Server
	grpcCerts     *certs.Serving  // nil when TLS is given or Insecure
	adm           *admissionParts // nil without admission
	uninstaller   *uninstaller
	// tenure is the leader's, which fences its lifecycle deliveries; nil
	// without leader election.
	tenure *tenure
	stops  []func()
}

// assemble builds the parts, in the order they depend on one another.
func (b *Broker) assemble(ctx context.Context, authz *auth.Authenticator) (_ *parts, err error) {
	p := &parts{Broker: b, cfg: rest.CopyConfig(b.opts.Config)}
	defer func() {
		if err != nil {
			p.stop() // p, not the nil the error returns
		}
	}()
	if err := p.clients(); err != nil {
		return nil, err
	}
	var stopEvents, stopHandlerEvents func()
	p.recorder, stopEvents = newEventRecorder(p.kube, b.log)
	p.handlerEvents, stopHandlerEvents = newHandlerEvents(p.cfg, !b.opts.Insecure, b.log)
	p.stops = append(p.stops, stopEvents, stopHandlerEvents)
	p.store = &presence.Store{Client: p.kube, Namespace: b.opts.Namespace}
	if err := ensureNamespace(ctx, p.kube, b.opts.Namespace); err != nil {
		b.log.Warn("cannot make sure the broker's namespace exists; presence may not be recorded", "namespace", b.opts.Namespace, "error", err)
	}
	if !b.opts.Insecure {
		// Handlers' identities are checked, so their Leases are signed:
		// the restore trusts only what it signed (presence/sign.go).
		if p.store.Key, err = presence.LoadKey(ctx, p.kube, b.opts.Namespace, b.log); err != nil {
			return nil, err
		}
	}
	tlsConfig, err := p.servingTLS(ctx)
	if err != nil {
		return nil, err
	}
	kinds := session.LifecycleKinds
	if b.opts.Admission.Enabled() {
		if p.adm, err = newAdmission(ctx, p.kube, b.opts, b.alis, b.log); err != nil {
			return nil, err
		}
		if err := p.adm.certs.Load(ctx); err != nil {
			return nil, fmt.Errorf("loading the admission certificates: %w", err)
		}
		kinds = session.AllKinds
	}
	disc, err := resource.NewDiscovery(p.cfg)
	if err != nil {
		return nil, err
	}
	resolver := resource.NewResolver(resource.Options{Discovery: disc})
	if err := p.watchAndDispatch(resolver, kinds, authz); err != nil {
		return nil, err
	}
	if le := b.opts.LeaderElection; le.Enabled {
		p.tenure = &tenure{clock: clock.RealClock{}, length: le.withDefaults().RenewDeadline, log: b.log}
	}
	p.sessions = p.newSessions(resolver, kinds, authz)
	p.srv, p.healthSrv = p.newServer(tlsConfig, authz)
	p.uninstaller = &uninstaller{
		opts: b.opts, log: b.log, metrics: b.metrics, kube: p.kube, dyn: p.writer,
		store: p.store, recorder: p.recorder, adm: p.adm,
	}
	return p, nil
}

// clients are the API clients every other part shares.
func (p *parts) clients() error {
	p.wcfg = rest.CopyConfig(p.cfg)
	p.wcfg.QPS, p.wcfg.RateLimiter = -1, nil
	var err error
	if p.writer, err = dynamic.NewForConfig(p.wcfg); err != nil {
		return fmt.Errorf("creating dynamic client for writes: %w", err)
	}
	if p.kube, err = kube.NewForConfig(p.cfg); err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	return nil
}

// stop undoes what assemble started, last first.
func (p *parts) stop() {
	for i := len(p.stops) - 1; i >= 0; i-- {
		p.stops[i]()
	}
	p.stops = nil
}

// servingTLS is the gRPC server's TLS: Options.TLS, or the certificate of
// GRPCCerts, loaded; nil when Insecure.
func (p *parts) servingTLS(ctx context.Context) (*tls.Config, error) {
	if p.opts.Insecure || p.opts.TLS != nil {
		return p.opts.TLS, nil
	}
	var err error
	if p.grpcCerts, err = p.opts.GRPCCerts.serving(p.kube, p.opts.Namespace, p.opts.CAOverlap, p.log); err != nil {
		return nil, err
	}
	if err := p.grpcCerts.Load(ctx); err != nil {
		return nil, fmt.Errorf("loading the gRPC serving certificate: %w", err)
	}
	return grpcTLS(p.grpcCerts), nil
}

// watchAndDispatch builds the informers, the dispatcher and, with
// admission, the endpoint that hands reviews to the dispatcher. authz (nil
// when Insecure) re-checks the identities of the handlers restored from
// their Leases.
func (p *parts) watchAndDispatch(resolver *resource.Resolver, kinds map[binding.Kind]bool, authz *auth.Authenticator) error {
	watcher, err := informer.NewClient(p.cfg)
	if err != nil {
		return err
	}
	writeJSON, err := informer.NewClient(p.wcfg)
	if err != nil {
		return fmt.Errorf("creating the client for writes: %w", err)
	}
	p.informers = informer.New(informer.Options{Client: watcher, Log: p.log.Named("informer"), Metrics: p.metrics})
	p.metrics.ObserveCache(p.cacheUsage)
	var hooks dispatch.Webhooks
	if p.adm != nil {
		hooks = p.adm.hooks
	}
	var writeAs func(authenticationv1.UserInfo) (rest.Interface, error)
	if !p.opts.Insecure {
		writeAs = newActAs(p.wcfg).client
	}
	var reauthorize func(context.Context, string, presence.User, []*binding.Binding) error
	if authz != nil {
		reauthorize = func(ctx context.Context, handler string, u presence.User, bs []*binding.Binding) error {
			return authz.AuthorizeRecorded(ctx, authenticationv1.UserInfo{Username: u.Name, Groups: u.Groups}, handler, bs)
		}
	}
	o := p.opts
	p.dispatcher = dispatch.New(dispatch.Options{
		Log: p.log, Client: p.writer, Writer: writeJSON, ActAs: writeAs, Informers: p.informers, Recorder: p.recorder,
		HandlerEvents: p.handlerEvents, Workers: o.Workers, Presence: p.store, Identity: o.Identity, Absence: o.Absence,
		Metrics: p.metrics, Webhooks: hooks, NoPushdown: o.NoPushdown, StuckAfter: o.StuckAfter, Tracer: o.Tracer,
		WriteLimiter:   dispatch.NewWriteLimiter(o.WriteQPS, o.WriteBurst),
		ReleaseLimiter: dispatch.NewWriteLimiter(o.ReleaseQPS, dispatch.ReleaseBurst(o.ReleaseQPS)),
		Reauthorize:    reauthorize,
		Compile: func(ctx context.Context, bs []*tetherv1.Binding) ([]*binding.Binding, error) {
			return binding.Compile(ctx, bs, resolver, o.Defaults, kinds)
		},
	})
	if p.adm == nil {
		return nil
	}
	p.adm.server, err = admission.New(admission.Options{
		Log: p.log.Named("admission"), Reviewer: p.dispatcher, Listener: p.alis, Certs: p.adm.certs, Paths: p.adm.paths, Metrics: p.metrics,
		Tracer: p.opts.Tracer,
	})
	return err
}

// cacheUsage is the informers' cache, one series per resource whatever
// the versions watched.
func (p *parts) cacheUsage() map[string]metrics.CacheUsage {
	out := map[string]metrics.CacheUsage{}
	for gvr, u := range p.informers.Cached() {
		r := metrics.Resource(gvr.GroupResource())
		out[r] = metrics.CacheUsage{Objects: out[r].Objects + u.Objects, Bytes: out[r].Bytes + u.Bytes}
	}
	return out
}

// newSessions is the Connect service: sign-in, Hello checks and the
// streams, attached to the dispatcher.
func (p *parts) newSessions(resolver *resource.Resolver, kinds map[binding.Kind]bool, authz *auth.Authenticator) *session.Server {
	var authorize func(context.Context, string, int32, []*binding.Binding) error
	var authorizeName func(context.Context, string, int32) error
	if authz != nil {
		authorize, authorizeName = authz.Authorize, authz.AuthorizeName
	}
	var fence func() error
	if p.tenure != nil {
		fence = p.tenure.check
	}
	var excluded []string // namespaces no webhook intercepts
	if p.adm != nil {
		excluded = p.adm.excluded
	}
	o := p.opts
	return session.NewServer(session.Options{
		Log: p.log.Named("session"), Attacher: p.dispatcher, Resolver: resolver,
		Defaults: o.Defaults, HelloTimeout: o.HelloTimeout, Supported: kinds, ExcludedNamespaces: excluded,
		DefaultWindow: o.DefaultWindow, MaxWindow: o.MaxWindow, Version: o.Version,
		Metrics: p.metrics, Authorize: authorize, AuthorizeName: authorizeName, RecheckEvery: o.RecheckEvery,
		Index:    index.Streamer{Informers: p.informers, Log: p.log.Named("index")}.Stream,
		Admitted: func(ctx context.Context) { p.uninstaller.widenNow(ctx) },
		Fence:    fence, BatchLinger: o.BatchLinger,
	})
}

// newServer is the gRPC server: Connect, health (NOT_SERVING until the
// leader's work runs) and reflection.
func (p *parts) newServer(tlsConfig *tls.Config, authz *auth.Authenticator) (*grpc.Server, *health.Server) {
	opts := p.opts.GRPCLimits.serverOptions(p.opts.MaxMessageSize, tlsConfig)
	if authz != nil {
		opts = append(opts, grpc.ChainStreamInterceptor(authz.StreamInterceptor()))
	}
	srv := grpc.NewServer(opts...)
	tetherv1.RegisterBrokerServiceServer(srv, p.sessions)
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(srv, healthSrv)
	reflection.Register(srv)
	return srv, healthSrv
}

// setServing sets the gRPC health of the server and of the Connect service.
func (p *parts) setServing(st healthpb.HealthCheckResponse_ServingStatus) {
	p.healthSrv.SetServingStatus("", st)
	p.healthSrv.SetServingStatus(tetherv1.BrokerService_ServiceDesc.ServiceName, st)
}
