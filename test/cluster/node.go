package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/node"
)

// serveNode runs a one-node cluster in the foreground (make node), or with
// --build-only builds what it needs, helm and jaeger.
func serveNode(ctx context.Context, cfg config, log hclog.Logger, stdout, stderr io.Writer) error {
	if cfg.buildOnly {
		ensure := controlplane.EnsureOptions{Progress: stderr, Log: log.Named("ensure")}
		cp, err := controlplane.Ensure(ctx, ensure)
		if err != nil {
			return err
		}
		bins, err := controlplane.EnsureNode(ctx, ensure)
		if err != nil {
			return err
		}
		// Not for the node itself: the tests install the charts on it.
		helm, err := controlplane.EnsureHelm(ctx, ensure)
		if err != nil {
			return err
		}
		// Not for the node either: test/tracing sends its traces there.
		jaeger, err := controlplane.EnsureJaeger(ctx, ensure)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "etcd:           %s\nkube-apiserver: %s\nnode binaries:  %s\nhelm:           %s\njaeger:         %s\n",
			cp.Etcd, cp.KubeAPIServer, bins.Dir, helm, jaeger)
		return nil
	}
	c, err := node.Start(ctx, node.Options{Log: log.Named("node"), Progress: stderr})
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			log.Error("stopping the node", "error", err)
		}
	}()
	kubeconfig := c.KubeconfigPath()
	if cfg.kubeconfig != "" {
		if kubeconfig, err = copyKubeconfig(c.KubeconfigPath(), cfg.kubeconfig); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "node %s ready in %s; control plane at %s (logs in %s/logs and %s)\n",
		node.NodeName, c.StartDuration().Round(time.Millisecond), c.URL(), c.Dir(), c.ControlPlane.Dir())
	fmt.Fprintf(stdout, "kubeconfig: %s\n", kubeconfig)
	fmt.Fprintf(stdout, `
Use it from other terminals (kubectl: %[2]s, built with the control plane):
  export KUBECONFIG=%[1]s
  kubectl get nodes
  kubectl apply -k deploy/        # the broker and the example handler, image %[3]s
  kubectl -n tether-system get pods

Press Ctrl-C to stop it; that removes every Pod, the bridge %[4]s and the
iptables rules.
`, kubeconfig, rel(c.Binaries().Kubectl), node.TetherImage, node.Bridge)
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping the node")
	return nil
}
