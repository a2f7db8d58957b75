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
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/dispatch"
	"github.com/tether-dev/tether/broker/kube"
	"github.com/tether-dev/tether/broker/metrics"
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
	// CAOverlap is how long a new CA the broker makes (gRPC's, the
	// webhooks') is published beside the old one before it signs the
	// serving certificate, and how long the old one stays published after
	// (default certs.DefaultCAOverlap).
	CAOverlap time.Duration
	// Defaults fill in what bindings leave unset.
	Defaults binding.Defaults
	// Workers per handler (default dispatch.DefaultWorkers).
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
	// DefaultWindow and MaxWindow bound instance windows
	// (session.DefaultWindow and session.DefaultMaxWindow).
	DefaultWindow, MaxWindow int
	// HelloTimeout bounds the wait for Hello (session.DefaultHelloTimeout).
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
	// BatchLinger is session.Options.BatchLinger: how long a lifecycle
	// delivery waits for more to go with it to an instance that takes
	// batches (0: session.DefaultBatchLinger; negative: none).
	BatchLinger time.Duration
	// StuckAfter is how long a hold may stay on an object being deleted
	// before it is stuck (default contract.DefaultStuckAfter).
	StuckAfter time.Duration
	// Tracer makes a trace of each handled change (broker/tracing makes
	// it from the OTEL_* variables); nil traces nothing.
	Tracer trace.Tracer
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
	if opts.RecheckEvery <= 0 {
		opts.RecheckEvery = session.DefaultRecheckEvery
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

// Start serves until ctx ends, then stops gracefully: it binds the
// listeners, serves the metrics endpoints, assembles the parts (parts.go)
// and runs them (run.go).
func (b *Broker) Start(ctx context.Context) error {
	if err := b.Listen(); err != nil {
		return err
	}
	authz, err := b.newAuthenticator(rest.CopyConfig(b.opts.Config))
	if err != nil {
		return err
	}
	stopMetrics := b.serveMetrics(authz)
	defer stopMetrics()
	p, err := b.assemble(ctx, authz)
	if err != nil {
		return err
	}
	defer p.stop()
	err = p.run(ctx)
	b.log.Info("broker stopped")
	return err
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
	akube, err := kube.NewForConfig(acfg)
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
