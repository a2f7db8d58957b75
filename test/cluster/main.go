// Command cluster runs a local Kubernetes control plane (etcd and
// kube-apiserver built from the Go module proxy) for development.
//
//	go run ./test/cluster --build-only                         # build the binaries into the cache
//	go run ./test/cluster --kubeconfig .dev/kubeconfig         # run in the foreground until Ctrl-C
//	go run ./test/cluster --kubeconfig .dev/kubeconfig --demo  # the demo (make demo), then stop
//	go run ./test/cluster --kubeconfig .dev/kubeconfig --node  # a one-node cluster (make node), as root
//
// See package github.com/tether-dev/tether/test/controlplane for what runs and
// what is missing (no controller manager, scheduler or kubelet), and package
// github.com/tether-dev/tether/test/node for the one-node cluster.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/test/controlplane"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	buildOnly  bool
	kubeconfig string
	demo       bool
	node       bool
	logLevel   string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&c.buildOnly, "build-only", false,
		"build etcd and kube-apiserver into the cache if needed (the first time takes about 10 minutes), print their paths and exit; with --node also the one-node cluster's binaries and helm (about 15 minutes more), as make test does first")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "",
		"also write the admin kubeconfig to this `path`, creating its folder (it always exists inside the control plane's temporary folder)")
	fs.BoolVar(&c.demo, "demo", false,
		"start the control plane, run the broker and the example handler on it, narrate what they do, stop everything and exit (logs in the folder 'demo' next to --kubeconfig)")
	fs.BoolVar(&c.node, "node", false,
		"run a one-node cluster instead: the control plane on the node's bridge, kube-controller-manager, kube-scheduler, containerd, the kubelet and kube-proxy, with the image tether:dev of this checkout imported (needs root and Debian's runc, containernetworking-plugins and iptables; the first build takes about 10 minutes more)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log `level`: trace, debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: go run ./test/cluster [flags]

Runs a real etcd and kube-apiserver on loopback ports, in the foreground until
Ctrl-C or SIGTERM, then stops them and removes their temporary folder. The
binaries are built once from the Go module proxy and cached in
%s (override with %s).

Flags:
`, cacheDirForHelp(), controlplane.EnvDir)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if hclog.LevelFromString(c.logLevel) == hclog.NoLevel {
		return c, fmt.Errorf("unknown --log-level %q", c.logLevel)
	}
	if c.buildOnly && c.demo {
		return c, errors.New("--build-only and --demo exclude each other")
	}
	if c.node && c.demo {
		return c, errors.New("--node and --demo exclude each other: the demo runs on the control plane alone")
	}
	return c, nil
}

func cacheDirForHelp() string {
	d, err := controlplane.CacheDir()
	if err != nil {
		return "<user cache>/tether/controlplane/..."
	}
	return d
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "cluster: %v\n", err)
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name:   "cluster",
		Level:  hclog.LevelFromString(cfg.logLevel),
		Output: stderr,
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, log, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "cluster: %v\n", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, cfg config, log hclog.Logger, stdout, stderr io.Writer) error {
	if cfg.node {
		return serveNode(ctx, cfg, log, stdout, stderr)
	}
	bins, err := controlplane.Ensure(ctx, controlplane.EnsureOptions{Progress: stderr, Log: log.Named("ensure")})
	if err != nil {
		return err
	}
	if cfg.buildOnly {
		fmt.Fprintf(stdout, "etcd:           %s\nkube-apiserver: %s\n", bins.Etcd, bins.KubeAPIServer)
		return nil
	}

	cpOpts := controlplane.Options{Log: log.Named("controlplane"), Binaries: bins}
	var demoDir, cpLog string
	if cfg.demo {
		if demoDir, err = demoFolder(cfg.kubeconfig); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(demoDir, "controlplane.log"))
		if err != nil {
			return err
		}
		defer f.Close()
		cpOpts.Stdout, cpOpts.Stderr, cpLog = f, f, f.Name()
	}
	cp, err := controlplane.Start(ctx, cpOpts)
	if err != nil {
		return err
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			log.Error("stopping the control plane", "error", err)
		}
	}()

	kubeconfig := cp.KubeconfigPath()
	if cfg.kubeconfig != "" {
		if kubeconfig, err = copyKubeconfig(cp.KubeconfigPath(), cfg.kubeconfig); err != nil {
			return err
		}
	}
	logs := cp.Dir()
	if cpLog != "" {
		logs = rel(cpLog)
	}
	fmt.Fprintf(stdout, "control plane ready at %s in %s (logs in %s)\n",
		cp.URL(), cp.StartDuration().Round(time.Millisecond), logs)
	fmt.Fprintf(stdout, "kubeconfig: %s\n", kubeconfig)

	if cfg.demo {
		err := runDemo(ctx, demoConfig{kubeconfig: kubeconfig, dir: demoDir, out: stdout, extraLogs: []string{cpLog}})
		fmt.Fprintln(stdout, "stopping the control plane")
		return err
	}
	kubectl := "kubectl"
	if k := cp.Binaries().Kubectl; k != "" {
		kubectl = rel(k)
	}
	fmt.Fprintf(stdout, `
Use it from other terminals (kubectl: %[2]s, built with the control plane):
  export KUBECONFIG=%[1]s
  kubectl get ns
  go run ./cmd/broker --kubeconfig %[1]s --insecure --admission-listen 127.0.0.1:8443
  go run ./cmd/example-handler --kubeconfig %[1]s --insecure

The API server runs on this machine, so it calls the broker's webhooks on
loopback. They let the broker's own user through unreviewed, and the broker
uses this kubeconfig's user: to see the example handler refuse a bad ttl, ask
as another user:
  kubectl create secret generic tmp --from-literal=a=b
  kubectl annotate secret tmp ttl.tether.dev/ttl=banana --as=alice --as-group=system:masters

Press Ctrl-C to stop it.
`, kubeconfig, kubectl)
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping the control plane")
	return nil
}

// copyKubeconfig writes the kubeconfig at src to dst (creating dst's folder)
// and returns dst's absolute path.
func copyKubeconfig(src, dst string) (string, error) {
	abs, err := filepath.Abs(dst)
	if err != nil {
		return "", fmt.Errorf("resolving --kubeconfig %q: %w", dst, err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("reading the generated kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return "", fmt.Errorf("creating the folder for --kubeconfig: %w", err)
	}
	if err := os.WriteFile(abs, data, 0o600); err != nil {
		return "", fmt.Errorf("writing --kubeconfig: %w", err)
	}
	return abs, nil
}
