// Command example-handler is a Tether handler built on the Go SDK. It tells
// the two stories Tether comes from, and shows admission on the second:
//
//   - the replicator copies Secrets and ConfigMaps annotated
//     replicator.tether.dev/enabled: "true" into other namespaces
//     (replicator.tether.dev/include-namespaces and exclude-namespaces, both
//     comma-separated, pick them; no include list means every other
//     namespace, and never kube-system, kube-public or kube-node-lease).
//     Copies are labelled replicator.tether.dev/copy: "true",
//     name their source in replicator.tether.dev/source: "<ns>/<name>" and
//     are kept in step on create, update and a reconcile timer; deleting
//     the source deletes them. Sources carry the hold tether.dev/<name>.
//   - the TTL reaper deletes Secrets once their annotation
//     ttl.tether.dev/ttl (a Go duration) has passed since their creation.
//     It never holds them.
//   - the TTL reaper's validating webhook refuses, on CREATE and UPDATE, a
//     Secret whose ttl.tether.dev/ttl is not a positive Go duration, with
//     a message that says why. The broker serves the webhook and forwards
//     each review to the handler, which serves no HTTPS; the broker must
//     be started with --admission-listen, else run the handler with
//     --ttl-webhook=false. Its failure policy is Ignore: while the handler
//     is away, Secrets are admitted unchecked (--ttl-webhook-fail-closed
//     refuses them instead).
//
// The handler connects to the broker with --broker and writes copies with
// its own Kubernetes client (--kubeconfig; else $KUBECONFIG, the in-cluster
// service account, ~/.kube/config). It works in every namespace if that
// identity may list Secrets and ConfigMaps cluster-wide; else only in the
// namespaces that opted in by granting it them (a RoleBinding, as
// deploy/example-handler documents): it binds there, copies only there,
// and connects again when the set changes. --namespaces names the
// namespaces it binds instead (copies then go anywhere, as above). Run
// `example-handler -help` for the flags.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/broker/buildinfo"
	"github.com/tether-dev/tether/broker/memlimit"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/sdk/kubeconfig"
)

// config is what the flags say.
type config struct {
	broker            string
	insecure          bool
	caFile            string
	serverName        string
	token             string
	tokenFile         string
	kubeconfig        string
	name              string
	namespaces        string
	logLevel          string
	logFormat         string
	reconcileInterval time.Duration
	ttlInterval       time.Duration
	ttlWebhook        bool
	// ttlWebhookFailClosed gives the webhook failurePolicy Fail.
	ttlWebhookFailClosed bool
	priority             int
	grantInterval        time.Duration
}

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run is main without the exit: 0 on success or -help, 2 for bad flags, 1
// when the handler fails.
func run(args []string, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version") {
		fmt.Println("tether-example-handler", buildinfo.Version())
		return 0
	}
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "example-handler:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, c, stderr); err != nil {
		fmt.Fprintln(stderr, "example-handler:", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, out io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("example-handler", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, `Usage: example-handler [flags]

A Tether handler with two jobs: it replicates Secrets and ConfigMaps annotated
replicator.tether.dev/enabled: "true" into other namespaces (see
replicator.tether.dev/include-namespaces and exclude-namespaces), and deletes
Secrets whose ttl.tether.dev/ttl annotation (a Go duration) has passed.
A validating webhook refuses Secrets whose ttl is not a positive duration.
The broker serves it, so it needs a broker started with --admission-listen;
with another broker, pass --ttl-webhook=false.
The Kubernetes client is found as kubectl finds it: --kubeconfig, then
$KUBECONFIG, then the in-cluster service account, then ~/.kube/config.
SIGINT or SIGTERM stop it gracefully.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.broker, "broker", "127.0.0.1:7443", "broker address `HOST:PORT`")
	fs.BoolVar(&c.insecure, "insecure", false, "connect in plain text without a token, to a broker started with --insecure for local development")
	fs.StringVar(&c.caFile, "tls-ca-file", "", "PEM `file` of the CA that signed the broker's certificate (default: the system roots)")
	fs.StringVar(&c.serverName, "tls-server-name", "", "`name` to verify the broker's certificate against (default: the host in --broker)")
	fs.StringVar(&c.token, "token", "", "bearer `token` for the broker (default: the in-cluster service account token)")
	fs.StringVar(&c.tokenFile, "token-file", "", "`file` to read the bearer token from on every connection attempt")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig `path` for writing copies and deleting Secrets (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	fs.StringVar(&c.name, "name", "example", "handler `name`; the hold is the finalizer tether.dev/<name>")
	fs.StringVar(&c.namespaces, "namespaces", "", "comma-separated `list` of namespaces whose objects the handler binds to; copies go to any other namespace\n"+
		"(default: every namespace if it may list Secrets and ConfigMaps cluster-wide, else those that opted in by granting it them,\n"+
		"which are also the only ones copies go to; never kube-system, kube-public, kube-node-lease)")
	fs.DurationVar(&c.grantInterval, "grant-interval", time.Minute, "without --namespaces, how often the handler looks again which namespaces opted in,\n"+
		"and connects again with them when they changed")
	fs.StringVar(&c.logLevel, "log-level", "info", "log `level`: trace, debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log `format`: text or json")
	fs.DurationVar(&c.reconcileInterval, "reconcile-interval", 30*time.Second, "how often the replicator re-creates missing copies and updates drifted ones")
	fs.DurationVar(&c.ttlInterval, "ttl-interval", 5*time.Second, "how often the TTL reaper looks at each Secret with a ttl")
	fs.BoolVar(&c.ttlWebhook, "ttl-webhook", true, "refuse Secrets whose ttl is not a positive duration, with a validating webhook the broker serves;\n"+
		"set it to false for a broker started without --admission-listen, which would refuse the handler")
	fs.BoolVar(&c.ttlWebhookFailClosed, "ttl-webhook-fail-closed", false, "refuse, rather than admit unchecked, a Secret with a ttl while no instance of the handler answers its review\n"+
		"(the webhook's failurePolicy Fail; by default Ignore, so that the example never blocks writes)")
	fs.IntVar(&c.priority, "priority", 0, fmt.Sprintf("the instance's `priority` (0 to %d): while connected, the instances of a handler's highest priority take all its objects;\n"+
		"run one on a laptop with --priority 1 to take over from the in-cluster ones (needs the takeover grant), which get the work back when it stops", tetherv1.MaxPriority))
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.broker == "" {
		return nil, errors.New("--broker is required")
	}
	if c.token != "" && c.tokenFile != "" {
		return nil, errors.New("--token and --token-file exclude each other")
	}
	if c.insecure && (c.caFile != "" || c.serverName != "") {
		return nil, errors.New("--tls-ca-file and --tls-server-name make no sense with --insecure")
	}
	if hclog.LevelFromString(c.logLevel) == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level: unknown level %q", c.logLevel)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return nil, fmt.Errorf("--log-format: want text or json, not %q", c.logFormat)
	}
	if c.priority < 0 || c.priority > tetherv1.MaxPriority {
		return nil, fmt.Errorf("--priority: %d is not between 0 and %d", c.priority, tetherv1.MaxPriority)
	}
	for flagName, d := range map[string]time.Duration{"--reconcile-interval": c.reconcileInterval, "--ttl-interval": c.ttlInterval, "--grant-interval": c.grantInterval} {
		if d < sdk.MinTimerInterval {
			return nil, fmt.Errorf("%s: %v is shorter than %v", flagName, d, sdk.MinTimerInterval)
		}
	}
	return c, nil
}

// serve connects to the cluster and the broker and handles deliveries until
// ctx ends.
func serve(ctx context.Context, c *config, stderr io.Writer) error {
	log := hclog.New(&hclog.LoggerOptions{
		Name:       "example-handler",
		Level:      hclog.LevelFromString(c.logLevel),
		Output:     stderr,
		JSONFormat: c.logFormat == "json",
	})
	if err := memlimit.Apply(os.Getenv, log); err != nil {
		return err
	}
	restCfg, source, err := kubeconfig.Load(c.kubeconfig)
	if err != nil {
		return err
	}
	restCfg.UserAgent = "tether-example-handler"
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("creating the dynamic client: %w", err)
	}
	log.Info("using cluster", "from", source, "host", restCfg.Host)

	opts, err := c.sdkOptions(log)
	if err != nil {
		return err
	}
	// next is where the handler found itself granted when it last looked
	// (nil: look now, and wait for a first namespace).
	var next *scope
	for {
		var s scope
		if next != nil && (next.all || len(next.namespaces) > 0) {
			s = *next
		} else if s, err = c.waitForScope(ctx, kube, log); err != nil || ctx.Err() != nil {
			return err
		}
		if next, err = c.runIn(ctx, s, kube, dyn, opts, log); next == nil {
			return err
		}
	}
}

// waitForScope is where the handler is to work: the namespaces of
// --namespaces, else where it is granted (grantedScope), waiting for a
// first namespace to opt in.
func (c *config) waitForScope(ctx context.Context, kube kubernetes.Interface, log hclog.Logger) (scope, error) {
	if ns := splitList(c.namespaces); len(ns) > 0 {
		// Sorted as grantedScope's are: every instance of a handler must
		// declare the same bindings, in the same order.
		slices.Sort(ns)
		return scope{namespaces: slices.Compact(ns), given: true}, nil
	}
	told := false
	tick := time.NewTicker(c.grantInterval)
	defer tick.Stop()
	for {
		s, err := grantedScope(ctx, kube)
		if err != nil || s.all || len(s.namespaces) > 0 {
			return s, err
		}
		if !told {
			told = true
			log.Info("no namespace has opted in yet: bind the ClusterRole tether-example-handler-objects to this handler's ServiceAccount in a namespace (deploy/README.md)",
				"every", c.grantInterval)
		}
		select {
		case <-ctx.Done():
			return scope{}, nil
		case <-tick.C:
		}
	}
}

// runIn runs the handler with its bindings in s until ctx ends, or until
// the namespaces it is granted change (without --namespaces): then it
// returns them, and serve connects again with them.
func (c *config) runIn(ctx context.Context, s scope, kube kubernetes.Interface, dyn dynamic.Interface, opts []sdk.Option, log hclog.Logger) (next *scope, err error) {
	h := sdk.New(c.name, opts...)
	var bindScope []sdk.BindingOption
	var within []string
	if !s.all {
		bindScope = []sdk.BindingOption{sdk.Namespaces(s.namespaces...)}
	}
	if !s.all && !s.given {
		within = s.namespaces
	}
	(&replicator{kube: kube, dyn: dyn, within: within}).register(h, c.reconcileInterval, bindScope)
	(&reaper{dyn: dyn, now: time.Now}).register(h, c.ttlInterval, bindScope)
	if c.ttlWebhook {
		registerTTLWebhook(h, bindScope, c.ttlWebhookFailClosed)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var changed atomic.Pointer[scope]
	if c.namespaces == "" {
		go func() {
			if now, ok := watchScope(runCtx, kube, s, c.grantInterval, log); ok {
				changed.Store(&now)
				cancel()
			}
		}()
	}
	log.Info("connecting to the broker", "broker", c.broker, "handler", c.name, "insecure", c.insecure,
		"all_namespaces", s.all, "namespaces", s.namespaces)
	err = h.Run(runCtx, c.broker)
	if ctx.Err() != nil {
		return nil, err
	}
	return changed.Load(), err
}

// watchScope looks every interval where the handler is granted, and
// returns it once that is no longer s; false when ctx ends.
func watchScope(ctx context.Context, kube kubernetes.Interface, s scope, interval time.Duration, log hclog.Logger) (scope, bool) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return scope{}, false
		case <-tick.C:
		}
		now, err := grantedScope(ctx, kube)
		switch {
		case err != nil:
			log.Warn("cannot tell where the handler is granted; keeping its namespaces", "error", err)
		case !now.equal(s):
			log.Info("the namespaces the handler is granted changed; connecting again with them",
				"namespaces", now.namespaces, "all_namespaces", now.all)
			return now, true
		}
	}
}

// sdkOptions turns the connection flags into SDK options.
func (c *config) sdkOptions(log hclog.Logger) ([]sdk.Option, error) {
	opts := []sdk.Option{sdk.WithLogger(log.Named("sdk")), sdk.WithPriority(c.priority)}
	switch {
	case c.token != "":
		opts = append(opts, sdk.WithToken(c.token))
	case c.tokenFile != "":
		opts = append(opts, sdk.WithTokenFile(c.tokenFile))
	}
	if c.insecure {
		return append(opts, sdk.WithInsecure()), nil
	}
	opts = append(opts, sdk.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.serverName}))
	if c.caFile != "" {
		// Checked once here, so that a wrong path fails at start; the SDK
		// reads it again at every connection attempt, so that a rotated CA
		// is trusted at the next reconnect.
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca-file: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca-file: no PEM certificate in %s", c.caFile)
		}
		opts = append(opts, sdk.WithTLSCAFile(c.caFile))
	}
	return opts, nil
}
