// Command broker runs the Tether broker: it watches the cluster and streams
// lifecycle events to handler processes over gRPC, owning the finalizers it
// adds. Run `broker -help` for the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/buildinfo"
	"github.com/tether-dev/tether/broker/certs"
	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/dispatch"
	"github.com/tether-dev/tether/broker/memlimit"
	"github.com/tether-dev/tether/broker/session"
	"github.com/tether-dev/tether/broker/tracing"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk/kubeconfig"
)

type config struct {
	kubeconfig    string
	listen        string
	insecure      bool
	grpcCerts     broker.GRPCCerts
	caOverlap     time.Duration
	tlsHosts      string
	qps           float64
	burst         int
	logLevel      string
	logFormat     string
	workers       int
	noPushdown    bool
	defaultWindow int
	maxWindow     int
	helloTimeout  time.Duration
	batchLinger   time.Duration
	maxMsgSize    int
	grpcLimits    broker.GRPCLimits
	retries       int
	timeout       time.Duration
	backoff       time.Duration
	maxBackoff    time.Duration
	namespace     string
	identity      string
	deployment    string
	metricsListen string
	metricsSet    bool // --metrics-listen was given
	metricsOpen   bool
	grace         time.Duration
	maxGrace      time.Duration
	absentAfter   time.Duration
	releaseQPS    float64
	maxAbsent     time.Duration
	leader        broker.LeaderElection
	admission     broker.Admission
	audiences     string
	recheckEvery  time.Duration
	stuckAfter    time.Duration
	// excludeNamespaces, excludeUsers and excludeGroups are
	// --admission-exclude-namespaces, -users and -groups as given.
	excludeNamespaces, excludeUsers, excludeGroups string
}

func main() {
	args := os.Args[1:]
	run := serve
	if len(args) > 0 {
		switch args[0] {
		case "status":
			run, args = status, args[1:]
		case "release":
			run, args = releaseCmd, args[1:]
		case "relay":
			run, args = relayCmd, args[1:]
		case "serve":
			args = args[1:]
		case "version", "-version", "--version":
			fmt.Println("tether-broker", buildinfo.Version())
			return
		}
	}
	if err := run(args, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "broker:", err)
		}
		os.Exit(2)
	}
}

func parseFlags(args []string, out io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: broker [serve] [flags]\n       broker status [flags]\n       broker release (--handler NAME ... | --all) [flags]\n       broker relay [flags]\n       broker --version\n\n"+
			"The Tether broker. Kubeconfig is found as kubectl finds it: --kubeconfig, then\n$KUBECONFIG, then the in-cluster service account, then ~/.kube/config.\n"+
			"'broker status -help', 'broker release -help' and 'broker relay -help' describe the subcommands.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	commonFlags(fs, &c.kubeconfig, &c.namespace)
	c.handlerFlags(fs)
	c.leaderFlags(fs)
	c.servingFlags(fs)
	c.admissionFlags(fs)
	c.clientFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) { c.metricsSet = c.metricsSet || f.Name == "metrics-listen" })
	c.grpcCerts.Hosts = append([]string{}, splitList(c.tlsHosts)...) // given empty: none
	// Not nil, even when given empty: nil would mean the defaults.
	c.admission.ExcludeNamespaces = append([]string{}, splitList(c.excludeNamespaces)...)
	c.admission.ExcludeUsers = append([]string{}, splitList(c.excludeUsers)...)
	c.admission.ExcludeGroups = append([]string{}, splitList(c.excludeGroups)...)
	if (c.grpcCerts.CertFile == "") != (c.grpcCerts.KeyFile == "") || (c.grpcCerts.CAFile != "" && c.grpcCerts.CertFile == "") {
		return nil, errors.New("--tls-cert-file needs --tls-key-file (and, optionally, --tls-ca-file)")
	}
	if c.insecure && c.grpcCerts.CertFile != "" {
		return nil, errors.New("--insecure serves plain text: --tls-cert-file does not go with it")
	}
	if err := c.admission.Check(); err != nil {
		return nil, err
	}
	if hclog.LevelFromString(c.logLevel) == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level: unknown level %q", c.logLevel)
	}
	switch c.logFormat {
	case "auto", "text", "json":
	default:
		return nil, fmt.Errorf("--log-format: want text, json or auto, not %q", c.logFormat)
	}
	return c, nil
}

// handlerFlags are the broker's identity and what it gives the handlers: grace,
// long-absence release, workers, windows and the defaults of bindings.
func (c *config) handlerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.identity, "identity", envOr("POD_NAME", ""), "this broker's name in the Leases it writes (default $POD_NAME, else the host name)")
	fs.StringVar(&c.deployment, "deployment", os.Getenv("TETHER_DEPLOYMENT"), "the broker's own Deployment in --namespace; deleting it makes the broker release every hold and exit (default $TETHER_DEPLOYMENT)")
	fs.DurationVar(&c.grace, "grace", dispatch.DefaultGrace, "how long a handler may have no instance before the objects being deleted that it holds are released")
	fs.DurationVar(&c.maxGrace, "max-grace", dispatch.DefaultMaxGrace, "the longest grace a handler may ask for in Hello")
	fs.DurationVar(&c.absentAfter, "absent-release-after", dispatch.DefaultAbsentReleaseAfter, "after this long absent, a handler's holds are stripped from every object until it returns (0: never)")
	fs.Float64Var(&c.releaseQPS, "absent-release-qps", dispatch.DefaultReleaseQPS, "how many holds a second are stripped from the objects of a handler absent past --absent-release-after")
	fs.DurationVar(&c.maxAbsent, "max-absent-release-after", dispatch.DefaultMaxAbsentReleaseAfter, "the longest absent-release-after a handler may ask for in Hello")
	fs.BoolVar(&c.noPushdown, "no-label-pushdown", false, "cache every object of a resource a handler binds; by default, when all of a handler's bindings of a resource\n"+
		"share label requirements (sdk.Labels), only the objects that meet them are listed, watched and cached")
	fs.IntVar(&c.workers, "workers", dispatch.DefaultWorkers, "workers per handler; in-flight deliveries are bounded by handler windows")
	fs.IntVar(&c.defaultWindow, "default-window", session.DefaultWindow, "window of a handler instance that asks for none")
	fs.IntVar(&c.maxWindow, "max-window", session.DefaultMaxWindow, "largest window a handler instance may ask for")
	fs.IntVar(&c.retries, "default-retries", 0, "retries of a failing delivery when its binding sets none (0: forever)")
	fs.DurationVar(&c.timeout, "default-timeout", binding.DefaultTimeout, "how long to wait for an ack when the binding sets no timeout")
	fs.DurationVar(&c.backoff, "default-backoff", binding.DefaultBackoff, "first retry delay when the binding sets none")
	fs.DurationVar(&c.maxBackoff, "default-max-backoff", binding.DefaultMaxBackoff, "largest retry delay when the binding sets none")
}

// leaderFlags are leader election's.
func (c *config) leaderFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.leader.Enabled, "leader-elect", false, "elect a leader among broker replicas with a Lease in --namespace; only the leader watches, dispatches and writes")
	fs.StringVar(&c.leader.LeaseName, "leader-elect-lease-name", broker.DefaultLeaseName, "name of the leader Lease")
	fs.DurationVar(&c.leader.LeaseDuration, "leader-elect-lease-duration", broker.DefaultLeaseDuration, "how long followers wait before taking over a leader that stopped renewing")
	fs.DurationVar(&c.leader.RenewDeadline, "leader-elect-renew-deadline", 0, "how long the leader keeps trying to renew before it gives up leading (default two thirds of the lease duration, at most 10s)")
	fs.DurationVar(&c.leader.RetryPeriod, "leader-elect-retry-period", 0, "how often replicas try to acquire or renew the Lease (default half the renew deadline, at most 2s)")
	fs.StringVar(&c.leader.Pod, "leader-elect-pod", envOr("POD_NAME", ""), "this broker's own Pod in --namespace: while it leads, the Pod carries the label "+broker.LeaderLabel+"=true, which the Service selects to send handlers and webhook calls to the leader (default $POD_NAME; empty: no label)")
	fs.StringVar(&c.leader.LivenessAddress, "leader-elect-liveness-address", envOr("POD_IP", ""), "HOST or HOST:PORT where other replicas reach this one: while it leads, the address there that its process listens on until it exits (any free port unless given) is published on the leader Lease, and a follower that finds it refusing connections takes over without waiting for the Lease to expire (default $POD_IP, else the --listen IP unless it is unspecified; \"-\": none, followers wait for the Lease)")
	fs.BoolVar(&c.leader.ColdStandby, "leader-elect-cold-standby", false, "followers watch nothing: less memory and half the watches, but a takeover lists every object again before it is ready\n"+
		"(by default a follower keeps the caches of the handlers recorded in the presence Leases warm)")
}

// servingFlags are the gRPC and metrics endpoints': addresses, TLS, sign-in and
// connection limits.
func (c *config) servingFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "listen", "127.0.0.1:7443", "gRPC listen address HOST:PORT")
	fs.StringVar(&c.metricsListen, "metrics-listen", defaultMetricsListen, "HTTP address HOST:PORT of /metrics (Prometheus), /healthz and /readyz; empty: none.\n"+
		"The default is for local use and skipped with a warning when the port is taken; in a cluster pass \":9090\"")
	fs.BoolVar(&c.metricsOpen, "metrics-open", false, "serve /metrics to anyone who reaches --metrics-listen; by default a scraper needs a bearer token the API server accepts\n"+
		"and get on the non-resource URL /metrics (TokenReview, SubjectAccessReview); --insecure serves it open")
	fs.BoolVar(&c.insecure, "insecure", false, "serve plain text without authentication, for local development; loopback addresses only")
	fs.StringVar(&c.grpcCerts.CertFile, "tls-cert-file", "", "a gRPC serving certificate to use instead of generating one (cert-manager style; re-read when it changes)")
	fs.StringVar(&c.grpcCerts.KeyFile, "tls-key-file", "", "the key of --tls-cert-file")
	fs.StringVar(&c.grpcCerts.CAFile, "tls-ca-file", "", "the CA bundle that verifies --tls-cert-file, published in --tls-ca-configmap")
	fs.StringVar(&c.grpcCerts.SecretName, "tls-secret", broker.DefaultGRPCSecret, "Secret in --namespace keeping the gRPC serving certificate the broker generates and renews when no --tls-cert-file is given;\n"+
		"its CA is kept apart, in this name plus "+certs.CASecretSuffix)
	fs.StringVar(&c.grpcCerts.Service, "tls-service", broker.DefaultGRPCService, "the Service in --namespace handlers reach the broker through: the generated certificate is valid for its names")
	fs.StringVar(&c.grpcCerts.ReplicasService, "tls-replicas-service", broker.DefaultGRPCReplicasService, "the headless Service in --namespace that resolves to every ready replica, for handlers that connect to each:\n"+
		"the generated certificate is valid for its names too; - for none")
	fs.StringVar(&c.tlsHosts, "tls-hosts", "localhost,127.0.0.1", "comma-separated more names and IP addresses the generated certificate is valid for (localhost: kubectl port-forward)")
	fs.DurationVar(&c.caOverlap, "ca-overlap", certs.DefaultCAOverlap, "how long a new CA the broker makes (gRPC's, the webhooks') is published beside the old one before it signs\n"+
		"the serving certificate, and how long the old one stays published after the switch")
	fs.StringVar(&c.grpcCerts.CAConfigMap, "tls-ca-configmap", broker.DefaultCAConfigMap, "ConfigMap in --namespace where the broker publishes the CA bundle handlers verify it with (key "+broker.CAConfigMapKey+"); - publishes none")
	fs.StringVar(&c.audiences, "token-audience", "", "comma-separated audiences a handler's token must be meant for (TokenReview); empty: the API server's own")
	fs.DurationVar(&c.stuckAfter, "stuck-after", contract.DefaultStuckAfter, "how long a handler's hold may stay on an object being deleted before it is stuck: a HoldStuck Event\n"+
		"says why it stays, broker status lists it, and tether_holds_stuck counts it")
	fs.DurationVar(&c.recheckEvery, "recheck-permissions-every", session.DefaultRecheckEvery, "how often a connected handler's token and RBAC are checked again, a handler that lost them being disconnected,\n"+
		"and how often the identities of absent STRICT handlers are looked at, to find orphans (broker status)")
	fs.DurationVar(&c.helloTimeout, "hello-timeout", session.DefaultHelloTimeout, "how long a new stream may take to send Hello")
	fs.DurationVar(&c.batchLinger, "delivery-batch-linger", session.DefaultBatchLinger, "how long a lifecycle delivery alone in flight waits for more to send with it in one message, to a handler whose\n"+
		"SDK takes deliveries in batches (fewer reads and acks when changes come one by one; admission reviews never wait; 0: none)")
	fs.IntVar(&c.maxMsgSize, "max-message-size", tetherv1.DefaultMaxMessageBytes, "largest gRPC message accepted from a handler, in bytes")
	fs.IntVar(&c.grpcLimits.MaxConnections, "grpc-max-connections", broker.DefaultMaxConnections, "gRPC connections open at once; further ones wait until one closes")
	fs.DurationVar(&c.grpcLimits.MaxConnectionIdle, "grpc-max-connection-idle", broker.DefaultMaxConnectionIdle, "a gRPC connection without a stream this long is closed")
	fs.DurationVar(&c.grpcLimits.MaxConnectionAge, "grpc-max-connection-age", broker.DefaultMaxConnectionAge, "a gRPC connection this old (give or take 10%) is told to go away; handlers reconnect")
	fs.DurationVar(&c.grpcLimits.MaxConnectionAgeGrace, "grpc-max-connection-age-grace", broker.DefaultMaxConnectionAgeGrace, "how long the streams of a connection told to go away may go on before it is closed")
}

// admissionFlags are the admission webhooks'.
func (c *config) admissionFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.admission.Listen, "admission-listen", "", "HTTPS address HOST:PORT of the admission webhooks the API server calls; empty: validate and mutate bindings are refused")
	fs.StringVar(&c.admission.URL, "admission-url", "", "base URL at which the API server reaches --admission-listen, when the broker runs outside the cluster\n"+
		"(default https://<--admission-listen>; e.g. https://172.17.0.1:8443 for kind); the webhook configurations point there")
	fs.StringVar(&c.admission.Service, "admission-service", "", "name of the Service in --namespace in front of the broker's --admission-listen port, when the broker runs in the cluster;\n"+
		"the webhook configurations point to it instead of --admission-url")
	fs.IntVar(&c.admission.ServicePort, "admission-service-port", 8443, "port of --admission-service (and of --admission-replicas-service)")
	fs.StringVar(&c.admission.ReplicasService, "admission-replicas-service", "", "name of a Service in --namespace that selects every ready broker Pod, on the --admission-service-port;\n"+
		"the webhooks of handlers whose instances connect to every replica point there, so that any replica answers their reviews\n"+
		"(empty: every handler's point at --admission-service)")
	fs.StringVar(&c.admission.ReplicasURL, "admission-replicas-url", "", "base URL at which the API server reaches any of the replicas' --admission-listen, when the brokers run outside the cluster\n"+
		"(a balancer in front of them); the webhooks of handlers whose instances connect to every replica point there (empty: at --admission-url)")
	fs.DurationVar(&c.admission.ReadyWait, "admission-ready-wait", broker.DefaultAdmissionReadyWait, "with --admission-replicas-service or --admission-replicas-url, how long a replica that starts reports not ready\n"+
		"while a handler whose webhooks point at every replica has no instance connected to it, so that none of its reviews reach a replica without one (negative: no wait)")
	fs.StringVar(&c.admission.SecretName, "admission-secret", "tether-admission-tls", "Secret in --namespace keeping the serving certificate the broker generates and rotates for the webhooks;\n"+
		"its CA is kept apart, in this name plus "+certs.CASecretSuffix)
	fs.StringVar(&c.admission.CertFile, "admission-tls-cert-file", "", "a serving certificate to use instead of generating one (cert-manager style; re-read when it changes)")
	fs.StringVar(&c.admission.KeyFile, "admission-tls-key-file", "", "the key of --admission-tls-cert-file")
	fs.StringVar(&c.admission.CAFile, "admission-ca-file", "", "the CA bundle the API server verifies --admission-tls-cert-file with")
	fs.StringVar(&c.excludeNamespaces, "admission-exclude-namespaces", strings.Join(broker.DefaultExcludedNamespaces, ","),
		"comma-separated namespaces whose objects no webhook intercepts, so that a webhook failing closed cannot lock them out;\n"+
			"--namespace is always excluded besides. Leave one out to opt it in to the handlers' webhooks (empty: only --namespace is excluded)")
	fs.StringVar(&c.excludeUsers, "admission-exclude-users", strings.Join(broker.DefaultExcludedUsers, ","),
		"comma-separated users whose requests no webhook intercepts, in any namespace and on cluster-scoped objects, so that a webhook failing closed\n"+
			"cannot lock out the control plane; the broker's own user is always excluded besides (empty: only the broker's)")
	fs.StringVar(&c.excludeGroups, "admission-exclude-groups", strings.Join(broker.DefaultExcludedGroups, ","),
		"comma-separated groups whose members' requests no webhook intercepts, as --admission-exclude-users: by default the nodes\n"+
			"and kube-system's ServiceAccounts (kube-controller-manager's controllers, such as the namespace controller and the garbage collector). Empty: none")
}

// clientFlags are the API client's pace and the logs'.
func (c *config) clientFlags(fs *flag.FlagSet) {
	fs.Float64Var(&c.qps, "kube-api-qps", dispatch.DefaultWriteQPS, "writes per second to the API server: holds, progress and handlers' patches are paced to this rate\n"+
		"without holding up deliveries that write nothing (timer ticks); the broker's other requests are limited to the same rate")
	fs.IntVar(&c.burst, "kube-api-burst", dispatch.DefaultWriteBurst, "how many writes (and other requests) may go at once before --kube-api-qps paces them")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.StringVar(&c.logFormat, "log-format", "auto", "log format: text, json, or auto (json inside a cluster)")
}

func serve(args []string, _, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := newLogger(c.logLevel, c.logFormat, stderr)
	if err := memlimit.Apply(os.Getenv, log); err != nil {
		return err
	}
	restCfg, source, err := kubeconfig.Load(c.kubeconfig)
	if err != nil {
		return err
	}
	restCfg.QPS, restCfg.Burst = float32(c.qps), c.burst
	restCfg.UserAgent = "tether-broker/" + buildinfo.Version()
	log.Info("using cluster", "from", source, "host", restCfg.Host)

	if c.insecure {
		log.Warn("insecure mode: plain text, no authentication; for local development only")
	}

	opts := broker.Options{
		Log: log, Config: restCfg, Listen: c.listen, Insecure: c.insecure, GRPCCerts: c.grpcCerts, CAOverlap: c.caOverlap,
		Defaults: binding.Defaults{Retries: c.retries, Timeout: c.timeout, Backoff: c.backoff, MaxBackoff: c.maxBackoff},
		Workers:  c.workers, WriteQPS: c.qps, WriteBurst: c.burst, NoPushdown: c.noPushdown, ReleaseQPS: c.releaseQPS, DefaultWindow: c.defaultWindow, MaxWindow: c.maxWindow,
		HelloTimeout: c.helloTimeout, BatchLinger: noneIfZero(c.batchLinger), MaxMessageSize: c.maxMsgSize, GRPCLimits: c.grpcLimits, Version: buildinfo.Version(),
		Namespace: c.namespace, Identity: c.identity, Deployment: c.deployment, MetricsListen: c.metricsListen, MetricsOpen: c.metricsOpen,
		LeaderElection: c.leader, Admission: c.admission,
		TokenAudiences: splitList(c.audiences), RecheckEvery: c.recheckEvery, StuckAfter: c.stuckAfter,
		Absence: dispatch.AbsenceLimits{
			Grace: c.grace, MaxGrace: c.maxGrace,
			AbsentReleaseAfter: noneIfZero(c.absentAfter), MaxAbsentReleaseAfter: c.maxAbsent,
		},
	}
	tr, err := tracing.FromEnv(context.Background())
	if err != nil {
		return err
	}
	defer shutdownTracing(tr, log)
	opts.Tracer = tr.Tracer
	if tr.Tracer != nil {
		log.Info("tracing: sending spans over OTLP as the OTEL_* variables say")
	}
	b, err := listen(opts, c.metricsSet, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return b.Start(ctx)
}

// shutdownTracing sends the spans still buffered, waiting at most
// tracingFlush for the collector.
func shutdownTracing(tr tracing.Tracer, log hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), tracingFlush)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		log.Warn("tracing: spans lost at exit", "error", err)
	}
}

// tracingFlush bounds how long a stopping broker waits to send its last spans.
const tracingFlush = 5 * time.Second

// defaultMetricsListen is --metrics-listen's default, for local use.
const defaultMetricsListen = "127.0.0.1:9090"

// listen builds the broker and binds its listeners. When the metrics
// address is the default (not asked for) and taken, for instance by a second
// broker on a laptop, the broker runs without the HTTP endpoints.
func listen(opts broker.Options, metricsSet bool, log hclog.Logger) (*broker.Broker, error) {
	b, err := broker.New(opts)
	if err != nil {
		return nil, err
	}
	err = b.Listen()
	if !metricsSet && errors.Is(err, broker.ErrMetricsListen) && errors.Is(err, syscall.EADDRINUSE) {
		log.Warn("the default metrics address is taken; serving no metrics or health endpoints (set --metrics-listen)",
			"address", opts.MetricsListen)
		opts.MetricsListen = ""
		if b, err = broker.New(opts); err != nil {
			return nil, err
		}
		err = b.Listen()
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// noneIfZero maps a duration flag's 0 (never, none) to the library's
// negative, whose 0 is its default.
func noneIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// commonFlags are the flags every subcommand takes.
func commonFlags(fs *flag.FlagSet, kubeconfig, namespace *string) {
	fs.StringVar(kubeconfig, "kubeconfig", "", "path to a kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	fs.StringVar(namespace, "namespace", envOr("POD_NAMESPACE", "tether-system"), "the broker's namespace, where handler presence Leases live ($POD_NAMESPACE when set)")
}

func newLogger(level, format string, out io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "broker",
		Level:      hclog.LevelFromString(level),
		Output:     out,
		JSONFormat: format == "json" || (format == "auto" && os.Getenv("KUBERNETES_SERVICE_HOST") != ""),
	})
}
