package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/buildinfo"
	"github.com/tether-dev/tether/broker/kube"
	"github.com/tether-dev/tether/broker/relay"
	"github.com/tether-dev/tether/sdk/kubeconfig"
)

// serviceAccountNamespace is where a Pod's ServiceAccount token mount
// says its namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// relayCmd runs the admission relay beside a broker in its Pod (package
// broker/relay).
func relayCmd(args []string, _, stderr io.Writer) error {
	var opts relay.Options
	var peers relay.DNSPeers
	var logLevel, logFormat, secret, namespace, kubeconfigPath string
	fs := flag.NewFlagSet("broker relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: broker relay [flags]\n\n"+
			"Listens on the broker Pod's admission port and passes each review on to the broker's\n"+
			"admission listener in the same Pod (--local); while that does not answer (the broker's\n"+
			"process died, and the kubelet has not yet taken the Pod out of the Service's endpoints),\n"+
			"to another replica's admission listener, found from --peers. Run as a second container\n"+
			"of the broker's Pod, with the broker's --admission-listen on another port.\n\n"+
			"Once it has read the admission serving certificate from the Secret --tls-secret, it\n"+
			"serves HTTPS with it and relays each request: one the local broker did not answer\n"+
			"(refused, or its connection ended before an answer, as when the process is killed\n"+
			"under way) is sent again to another replica. Until then, and with --tls-secret empty,\n"+
			"it forwards each TCP connection byte for byte (TLS stays between the API server and\n"+
			"a broker), to another replica when the local broker refuses it.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&opts.Listen, "listen", relay.DefaultListen, "address HOST:PORT to accept connections on: the port the admission Services target")
	fs.StringVar(&opts.Local, "local", relay.DefaultLocal, "the broker's --admission-listen in this Pod")
	fs.StringVar(&peers.Name, "peers", "", "DNS name whose addresses are every ready replica (the headless Service tether-broker-replicas);\n"+
		"empty: no peers, a connection the local broker refuses is closed, a request it does not answer is answered 502")
	fs.IntVar(&peers.Port, "peer-port", 8444, "the port of the other replicas' --admission-listen (not their relay's, so that no connection goes round)")
	fs.StringVar(&peers.Own, "pod-ip", envOr("POD_IP", ""), "this Pod's address, left out of --peers' (default $POD_IP)")
	fs.DurationVar(&opts.DialTimeout, "dial-timeout", relay.DefaultDialTimeout, "how long each dial (and, with a certificate, each TLS handshake to a broker), and the lookup of --peers, may take")
	fs.DurationVar(&opts.Drain, "drain", relay.DefaultDrain, "after SIGTERM, how long to keep accepting connections, for the Pod's removal from the endpoints to reach\n"+
		"the API server and every node (sent to a peer once the local broker stopped); then the requests under way are answered\n"+
		"and connections forwarded byte for byte to a peer are closed once idle for "+relay.DefaultQuiet.String()+", those to the local broker once it\n"+
		"ended them, and the relay exits (0: none)")
	fs.StringVar(&secret, "tls-secret", broker.DefaultAdmissionSecret, "Secret in --namespace with the admission serving certificate every replica serves (tls.crt, tls.key, ca.crt):\n"+
		"the broker's --admission-secret, or cert-manager's; read at start, every "+relay.DefaultCertRetry.String()+" until it exists, then every "+relay.DefaultCertRefresh.String()+"\n"+
		"(empty: none, connections are forwarded byte for byte)")
	fs.StringVar(&namespace, "namespace", envOr("POD_NAMESPACE", podNamespace()), "the broker's namespace, where --tls-secret is ($POD_NAMESPACE, else the ServiceAccount's)")
	fs.StringVar(&kubeconfigPath, "kubeconfig", "", "path to a kubeconfig file, to read --tls-secret with (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	fs.StringVar(&opts.ServerName, "server-name", "", "the name the brokers' certificate is verified for (default: the certificate's first DNS name)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.StringVar(&logFormat, "log-format", "auto", "log format: text, json, or auto (json inside a cluster)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if hclog.LevelFromString(logLevel) == hclog.NoLevel {
		return fmt.Errorf("--log-level: unknown level %q", logLevel)
	}
	if opts.DialTimeout <= 0 {
		return errors.New("--dial-timeout must be positive")
	}
	if opts.Drain == 0 {
		opts.Drain = -1 // the flag's 0 is none; the library's is the default
	}
	opts.Log = newLogger(logLevel, logFormat, stderr).Named("relay")
	if peers.Name != "" {
		opts.Peers = peers
	}
	if secret != "" {
		opts.Certs = certSource(kubeconfigPath, namespace, secret, opts.Log)
	}
	r := relay.New(opts)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return r.Start(ctx)
}

// podNamespace is the namespace of the Pod's ServiceAccount, else
// tether-system.
func podNamespace() string {
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil && len(b) > 0 {
		return string(b)
	}
	return "tether-system"
}

// certSource reads the Secret name of namespace through the API server;
// nil, with a warning, when there is no cluster to read it from: the relay
// then forwards bytes, as it does until the Secret exists.
func certSource(path, namespace, name string, log hclog.Logger) relay.CertSource {
	cfg, from, err := kubeconfig.Load(path)
	if err == nil {
		cfg.UserAgent = "tether-broker-relay/" + buildinfo.Version()
		var client kube.Interface
		if client, err = kube.NewForConfig(cfg); err == nil {
			log.Info("reading the admission certificate", "secret", namespace+"/"+name, "from", from)
			return relay.SecretSource{Secrets: client.CoreV1().Secrets(namespace), Name: name}
		}
	}
	log.Warn("cannot read the admission certificate: forwarding connections byte for byte", "secret", namespace+"/"+name, "error", err)
	return nil
}
