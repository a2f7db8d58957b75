package broker

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker/admission"
	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/certs"
	"github.com/tether-dev/tether/broker/dispatch"
	"github.com/tether-dev/tether/broker/index"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/release"
	"github.com/tether-dev/tether/broker/resource"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Options configure a Broker. Config and one of Listener or Listen are
// required; every other zero value is a sensible default.
type Options struct {
	Log hclog.Logger
	// Config reaches the API server.
	Config *rest.Config
	// Listen is the gRPC address, e.g. "127.0.0.1:7443". Ignored when
	// Listener is set.
	Listen   string
	Listener net.Listener
	// Insecure serves plain text without authentication, for local
	// development; it refuses any address but loopback.
	Insecure bool
	// TLS serves gRPC with this configuration. When it is nil (and not
	// Insecure), the broker serves GRPCCerts: a generated certificate, or
	// given files, with the CA bundle published in a ConfigMap.
	TLS       *tls.Config
	GRPCCerts GRPCCerts
	// Defaults fill in what bindings leave unset.
	Defaults binding.Defaults
	// Workers per handler (default 64).
	Workers int
	// WriteQPS and WriteBurst pace the writes to objects (holds, progress,
	// handlers' patches) at this many per second, in bursts of WriteBurst
	// (default dispatch.DefaultWriteQPS and DefaultWriteBurst). A write waiting for its turn holds up no
	// delivery that writes nothing. Config's QPS and Burst limit the
	// broker's other requests.
	WriteQPS   float64
	WriteBurst int
	// NoPushdown caches every object of a bound resource instead of asking
	// the API server for only those the label selector shared by all of a
	// handler's bindings of it can match (binding.Pushdown).
	NoPushdown bool
	// ReleaseQPS paces, more slowly still, the writes that strip the holds
	// of a handler absent past absent_release_after (default
	// dispatch.DefaultReleaseQPS, in bursts of dispatch.ReleaseBurst).
	ReleaseQPS float64
	// DefaultWindow and MaxWindow bound instance windows (16 and 1024).
	DefaultWindow, MaxWindow int
	// HelloTimeout bounds the wait for Hello (10 s).
	HelloTimeout time.Duration
	// MaxMessageSize bounds one received gRPC message (4 MiB).
	MaxMessageSize int
	// GRPCLimits bound the gRPC connections' number, idleness and age.
	GRPCLimits GRPCLimits
	// Version is reported in Welcome.
	Version string
	// Namespace holds the handlers' presence Leases (default
	// "tether-system"); it is also where the broker's Deployment lives.
	Namespace string
	// Identity names this broker in the Leases it writes (default: the
	// host name).
	Identity string
	// Absence sets grace and long-absence release.
	Absence dispatch.AbsenceLimits
	// LeaderElection lets several replicas run: one leads, the others wait.
	LeaderElection LeaderElection
	// Deployment is the name of the broker's own Deployment in Namespace.
	// When set, the broker watches it: once it is being deleted, the broker
	// releases every hold it owns and exits (rule 3f). A restart or rolling
	// update releases nothing.
	Deployment string
	// MetricsListen is the address of the HTTP endpoints /metrics, /healthz
	// and /readyz, e.g. ":9090"; empty serves none. Ignored when
	// MetricsListener is set.
	MetricsListen   string
	MetricsListener net.Listener
	// MetricsOpen serves /metrics to anyone who reaches it. Otherwise,
	// unless Insecure, a scraper needs a bearer token the API server
	// accepts and "get" on the non-resource URL /metrics.
	MetricsOpen bool
	// Admission serves the handlers' validate and mutate bindings; the zero
	// value serves none.
	Admission Admission
	// TokenAudiences, when set, are the audiences a handler's token must be
	// meant for; empty accepts the API server's own.
	TokenAudiences []string
	// RecheckEvery is how often a session's rights are asked again, so that
	// withdrawn RBAC ends it (default 30 s).
	RecheckEvery time.Duration
}

// authQPS paces the broker's TokenReviews and SubjectAccessReviews.
const authQPS = 50

// Broker is the running broker.
type Broker struct {
	opts Options
	log  hclog.Logger
	lis  net.Listener

	metrics *metrics.Metrics
	mlis    net.Listener // metrics and health endpoints
	alis    net.Listener // admission endpoint
	health  readiness
}

// New checks opts and returns a Broker; it starts nothing.
func New(opts Options) (*Broker, error) {
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Config == nil {
		return nil, errors.New("broker: a Kubernetes client config is required")
	}
	if opts.Listener == nil && opts.Listen == "" {
		return nil, errors.New("broker: a listen address is required")
	}
	if opts.MaxMessageSize <= 0 {
		opts.MaxMessageSize = tetherv1.DefaultMaxMessageBytes
	}
	if opts.WriteQPS <= 0 {
		opts.WriteQPS = dispatch.DefaultWriteQPS
	}
	if opts.ReleaseQPS <= 0 {
		opts.ReleaseQPS = dispatch.DefaultReleaseQPS
	}
	if opts.WriteBurst <= 0 {
		opts.WriteBurst = dispatch.DefaultWriteBurst
	}
	if opts.Namespace == "" {
		opts.Namespace = "tether-system"
	}
	if opts.Identity == "" {
		// Replicas on one host (or pods without POD_NAME) must still differ:
		// the identity names the leader.
		host, _ := os.Hostname()
		opts.Identity = host + "-" + randomSuffix()
	}
	return &Broker{opts: opts, log: opts.Log, metrics: metrics.New(metrics.NewRegistry())}, nil
}

// Addr is the address the broker listens on, once Start has bound it.
func (b *Broker) Addr() net.Addr {
	if b.lis == nil {
		return nil
	}
	return b.lis.Addr()
}

// Listen binds the listener without serving yet, so that callers (and
// tests) can learn the address before Start.
func (b *Broker) Listen() error {
	if b.lis != nil {
		return nil
	}
	lis := b.opts.Listener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", b.opts.Listen); err != nil {
			return fmt.Errorf("listening on %s: %w", b.opts.Listen, err)
		}
	}
	if b.opts.Insecure && !isLoopback(lis.Addr()) {
		lis.Close()
		return fmt.Errorf("insecure mode serves only loopback addresses, not %s", lis.Addr())
	}
	if err := b.listenMetrics(); err != nil {
		lis.Close()
		return err
	}
	if err := b.listenAdmission(); err != nil {
		lis.Close()
		return err
	}
	b.lis = lis
	return nil
}

// Start serves until ctx ends, then stops gracefully.
func (b *Broker) Start(ctx context.Context) error {
	if err := b.Listen(); err != nil {
		return err
	}
	cfg := rest.CopyConfig(b.opts.Config)
	authz, err := b.newAuthenticator(cfg)
	if err != nil {
		return err
	}
	stopMetrics := b.serveMetrics(authz)
	defer stopMetrics()
	// The dispatcher paces its writes itself, without holding a worker
	// while a write waits, so its client has no limit of its own.
	wcfg := rest.CopyConfig(cfg)
	wcfg.QPS, wcfg.RateLimiter = -1, nil
	writer, err := dynamic.NewForConfig(wcfg)
	if err != nil {
		return fmt.Errorf("creating dynamic client for writes: %w", err)
	}
	writeJSON, err := informer.NewClient(wcfg)
	if err != nil {
		return fmt.Errorf("creating the client for writes: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating discovery client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	recorder, stopEvents := newEventRecorder(kube, b.log)
	defer stopEvents()
	store := &presence.Store{Client: kube, Namespace: b.opts.Namespace}
	if err := ensureNamespace(ctx, kube, b.opts.Namespace); err != nil {
		b.log.Warn("cannot make sure the broker's namespace exists; presence may not be recorded", "namespace", b.opts.Namespace, "error", err)
	}
	tlsConfig := b.opts.TLS
	var grpcCerts *certs.Serving
	if !b.opts.Insecure && tlsConfig == nil {
		if grpcCerts, err = b.newGRPCCerts(kube); err != nil {
			return err
		}
		if err := grpcCerts.Load(ctx); err != nil {
			return fmt.Errorf("loading the gRPC serving certificate: %w", err)
		}
		tlsConfig = grpcTLS(grpcCerts)
	}

	resolver := resource.NewResolver(resource.Options{Discovery: disc})
	watcher, err := informer.NewClient(cfg)
	if err != nil {
		return err
	}
	informers := informer.New(informer.Options{Client: watcher, Log: b.log.Named("informer"), Metrics: b.metrics})
	b.metrics.ObserveCache(func() map[string]metrics.CacheUsage {
		out := map[string]metrics.CacheUsage{}
		for gvr, u := range informers.Cached() {
			// One series per resource, whatever the versions watched.
			r := metrics.Resource(gvr.GroupResource())
			out[r] = metrics.CacheUsage{Objects: out[r].Objects + u.Objects, Bytes: out[r].Bytes + u.Bytes}
		}
		return out
	})
	kinds := session.LifecycleKinds
	var adm *admissionParts
	var hooks dispatch.Webhooks
	var excluded []string // namespaces no webhook intercepts
	if b.opts.Admission.Enabled() {
		if adm, err = b.newAdmission(ctx, kube); err != nil {
			return err
		}
		if err := adm.certs.Load(ctx); err != nil {
			return fmt.Errorf("loading the admission certificates: %w", err)
		}
		kinds, hooks, excluded = session.AllKinds, adm.hooks, adm.excluded
	}
	handlerEvents, stopHandlerEvents := newHandlerEvents(cfg, !b.opts.Insecure, b.log)
	defer stopHandlerEvents()
	var writeAs func(authenticationv1.UserInfo) (rest.Interface, error)
	if !b.opts.Insecure {
		writeAs = newActAs(wcfg).client
	}
	dispatcher := dispatch.New(dispatch.Options{
		Log: b.log, Client: writer, Writer: writeJSON, ActAs: writeAs, Informers: informers, Recorder: recorder, HandlerEvents: handlerEvents, Workers: b.opts.Workers,
		Presence: store, Identity: b.opts.Identity, Absence: b.opts.Absence, Metrics: b.metrics,
		WriteLimiter: dispatch.NewWriteLimiter(b.opts.WriteQPS, b.opts.WriteBurst), Webhooks: hooks, NoPushdown: b.opts.NoPushdown,
		ReleaseLimiter: dispatch.NewWriteLimiter(b.opts.ReleaseQPS, dispatch.ReleaseBurst(b.opts.ReleaseQPS)),
		Compile: func(ctx context.Context, bs []*tetherv1.Binding) ([]*binding.Binding, error) {
			return binding.Compile(ctx, bs, resolver, b.opts.Defaults, kinds)
		},
	})
	if adm != nil {
		adm.server, err = admission.New(admission.Options{
			Log: b.log.Named("admission"), Reviewer: dispatcher, Listener: b.alis, Certs: adm.certs, Paths: adm.paths, Metrics: b.metrics,
		})
		if err != nil {
			return err
		}
	}
	var authorize func(context.Context, string, int32, []*binding.Binding) error
	var authorizeName func(context.Context, string, int32) error
	if authz != nil {
		authorize, authorizeName = authz.Authorize, authz.AuthorizeName
	}
	sessions := session.NewServer(session.Options{
		Log: b.log.Named("session"), Attacher: dispatcher, Resolver: resolver,
		Defaults: b.opts.Defaults, HelloTimeout: b.opts.HelloTimeout, Supported: kinds, ExcludedNamespaces: excluded,
		DefaultWindow: b.opts.DefaultWindow, MaxWindow: b.opts.MaxWindow, Version: b.opts.Version,
		Metrics: b.metrics, Authorize: authorize, AuthorizeName: authorizeName, RecheckEvery: b.opts.RecheckEvery,
		Index: index.Streamer{Informers: informers, Log: b.log.Named("index")}.Stream,
	})
	opts := b.serverOptions(tlsConfig)
	if authz != nil {
		opts = append(opts, grpc.ChainStreamInterceptor(authz.StreamInterceptor()))
	}
	srv := grpc.NewServer(opts...)
	tetherv1.RegisterBrokerServiceServer(srv, sessions)
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(srv, healthSrv)
	reflection.Register(srv)

	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	// A follower keeps the caches of the recorded handlers warm until, as
	// the leader, its restore has subscribed them.
	warmCtx, stopWarming := context.WithCancel(serveCtx)
	defer stopWarming()
	uninstalling := make(chan struct{})
	setServing := func(st healthpb.HealthCheckResponse_ServingStatus) {
		healthSrv.SetServingStatus("", st)
		healthSrv.SetServingStatus(tetherv1.BrokerService_ServiceDesc.ServiceName, st)
	}
	setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	// lead is the work of the replica that leads: watching, dispatching and
	// writing. Followers only serve gRPC, to refuse Connect with Unavailable.
	var uninstallErr error
	lead := func(lctx context.Context) {
		if b.uninstallUnderWay(lctx, kube) {
			// The replica that led before began an uninstall: finish it, and
			// never dispatch (which would add holds back).
			b.log.Info("another replica began uninstalling the broker: finishing the uninstall and exiting")
			closeOnce(uninstalling)
			stopServing()
			uninstallErr = b.uninstall(kube, writer, store, nil, recorder, adm)
			return
		}
		w, wctx := errgroup.WithContext(lctx)
		w.Go(func() error { return dispatcher.Start(wctx) })
		w.Go(func() error {
			b.awaitSynced(wctx, dispatcher.Synced)
			// The restore has subscribed what the follower kept warm.
			stopWarming()
			if le := b.opts.LeaderElection; le.Enabled && le.Pod != "" && wctx.Err() == nil {
				// Now the Service sends handlers here.
				if err := labelOwnPod(wctx, kube, b.opts.Namespace, le.Pod, true, b.log); err != nil && wctx.Err() == nil {
					b.log.Error("cannot mark this Pod the leader: the Service sends no handler here", "error", err)
				}
			}
			b.guardUninstall(wctx, kube, writer)
			// After the restore: a handler released before it would come
			// back with it.
			b.orphans(kube, writer, store, dispatcher, recorder, adm).run(wctx)
			return nil
		})
		if adm != nil {
			w.Go(func() error { return adm.hooks.Start(wctx) })
			w.Go(func() error { adm.forwardCAChanges(wctx); return nil })
		}
		if b.opts.Deployment != "" {
			w.Go(func() error {
				if watchUninstall(wctx, kube, b.opts.Namespace, b.opts.Deployment, b.log) {
					b.markUninstall(kube)
					closeOnce(uninstalling)
					stopServing()
				}
				return nil
			})
		}
		setServing(healthpb.HealthCheckResponse_SERVING)
		_ = w.Wait()
		setServing(healthpb.HealthCheckResponse_NOT_SERVING)
		b.unlabelOwnPod(kube)
		select {
		case <-uninstalling:
			// Still leading: no other replica takes over and adds holds
			// back while they are being released.
			uninstallErr = b.uninstall(kube, writer, store, dispatcher.Known(), recorder, adm)
		default:
		}
	}
	g, gctx := errgroup.WithContext(serveCtx)
	// The informers outlive a follower's wait, so that what it kept warm
	// is there when it leads.
	g.Go(func() error { return informers.Start(gctx) })
	if le := b.opts.LeaderElection; le.Enabled && !le.ColdStandby {
		g.Go(func() error { return dispatcher.KeepWarm(warmCtx) })
	}
	if le := b.opts.LeaderElection; le.Enabled {
		b.health.elected.Store(true)
		// A container restarted in a Pod that led must not be sent handlers
		// before it leads again.
		b.unlabelOwnPod(kube)
		// Renewals have a client of their own, as kube-controller-manager's
		// do: a busy dispatcher must not make the leader miss its deadline.
		lcfg := rest.CopyConfig(cfg)
		lcfg.QPS, lcfg.Burst, lcfg.RateLimiter = -1, 0, nil
		lkube, err := kubernetes.NewForConfig(lcfg)
		if err != nil {
			return fmt.Errorf("creating client for leader election: %w", err)
		}
		g.Go(func() error { return runElected(gctx, lkube, b.opts.Namespace, b.opts.Identity, le, b.log, lead) })
	} else {
		g.Go(func() error { lead(gctx); return nil })
	}
	g.Go(func() error {
		b.log.Info("broker serving", "address", b.lis.Addr().String(), "insecure", b.opts.Insecure,
			"leader_election", b.opts.LeaderElection.Enabled)
		b.health.serving.Store(true)
		if err := srv.Serve(b.limitConnections(b.lis)); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("serving gRPC: %w", err)
		}
		return nil
	})
	if grpcCerts != nil {
		g.Go(func() error { return grpcCerts.Start(gctx) })
		if cm := b.opts.GRPCCerts.withDefaults().CAConfigMap; cm != "-" {
			g.Go(func() error { publishCA(gctx, kube, b.opts.Namespace, cm, grpcCerts, b.log); return nil })
		}
	}
	if adm != nil {
		g.Go(func() error { return adm.certs.Start(gctx) })
		g.Go(func() error { return adm.server.Start(gctx) })
	}
	g.Go(func() error {
		<-gctx.Done()
		b.health.stopping.Store(true)
		healthSrv.Shutdown()
		sessions.Shutdown()
		stopGracefully(srv, 5*time.Second)
		return nil
	})
	err = errors.Join(g.Wait(), uninstallErr)
	b.log.Info("broker stopped")
	return err
}

// uninstall releases every hold the broker owns (rule 3f). It runs after
// the dispatcher stopped, so nothing adds a hold back, with the write client
// (no client-side limit): release.Run bounds how many writes go at once, and
// the uninstall must fit in the Pod's termination grace period.
func (b *Broker) uninstall(kube kubernetes.Interface, dyn dynamic.Interface, store *presence.Store, known []presence.Record, recorder *eventRecorder, adm *admissionParts) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if adm != nil {
		// First, so that no webhook of a handler is left pointing at a
		// broker that is gone.
		removed, err := adm.hooks.RemoveAll(ctx)
		if err != nil {
			b.log.Error("uninstall: cannot remove every webhook configuration", "error", err)
		}
		b.log.Info("uninstall: webhook configurations removed", "count", len(removed))
	}
	b.log.Info("the broker is being uninstalled: releasing every hold before exiting")
	released, err := release.Run(ctx, release.Options{
		Client: dyn, Presence: store, Known: known, Log: b.log.Named("release"),
		Event: func(obj *unstructured.Unstructured, handler string) {
			b.metrics.HoldReleased(handler, metrics.ReleaseUninstall)
			recorder.Event(obj, false, "HoldReleased",
				fmt.Sprintf("the Tether broker is being uninstalled: hold of handler %q released (rule 3f)", handler))
		},
	})
	b.log.Info("uninstall: holds released", "count", len(released))
	if err != nil {
		err = fmt.Errorf("releasing holds on uninstall: %w", err)
	}
	// Whatever the release did: an exiting broker must not keep its
	// namespace from being deleted.
	return errors.Join(err, b.unguardUninstall(ctx, kube, dyn))
}

// newAuthenticator is the handlers' and scrapers' authenticator; nil when
// Insecure. Reviews get a client and a request budget of their own: a
// flood of streams with bad tokens must not delay the leader's renewals.
func (b *Broker) newAuthenticator(cfg *rest.Config) (*auth.Authenticator, error) {
	if b.opts.Insecure {
		return nil, nil
	}
	acfg := rest.CopyConfig(cfg)
	acfg.QPS, acfg.Burst, acfg.RateLimiter = authQPS, 2*authQPS, nil
	akube, err := kubernetes.NewForConfig(acfg)
	if err != nil {
		return nil, fmt.Errorf("creating client for token and access reviews: %w", err)
	}
	return auth.New(auth.Options{Client: akube, Namespace: b.opts.Namespace, Audiences: b.opts.TokenAudiences, Metrics: b.metrics}), nil
}

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
