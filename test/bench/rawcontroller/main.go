// Command rawcontroller runs the create/delete benchmark's raw controller
// (package test/bench/raw) as a process of its own, so that the bench
// measures its CPU time and memory as it measures the broker's. It serves
// until SIGTERM or SIGINT.
//
//	rawcontroller -kubeconfig kubeconfig -namespace bench-raw-1000-1 -qps 100 -burst 200 -workers 64 -workload result
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/tether-dev/tether/test/bench/raw"
	"github.com/tether-dev/tether/test/bench/workload"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	namespace := flag.String("namespace", "", "namespace whose Widgets are handled (default: all namespaces)")
	qps := flag.Float64("qps", raw.DefaultQPS, "requests per second of the controller's client (client-go's rate limiter)")
	burst := flag.Int("burst", raw.DefaultBurst, "burst of the controller's client")
	workers := flag.Int("workers", raw.DefaultWorkers, "objects synced at once")
	workload := flag.String("workload", workload.Result, "what a new Widget gets besides the finalizer: "+strings.Join(workload.All, ", "))
	flag.Parse()
	if flag.NArg() > 0 || *qps <= 0 || *burst <= 0 || *workers <= 0 {
		fmt.Fprintln(os.Stderr, "rawcontroller: -qps, -burst and -workers must be positive and no arguments are accepted")
		os.Exit(2)
	}
	log.SetPrefix("rawcontroller: ")
	if err := run(*kubeconfig, raw.Options{Namespace: *namespace, QPS: *qps, Burst: *burst, Workers: *workers, Workload: *workload}); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(kubeconfig string, opts raw.Options) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	c, err := raw.New(cfg, opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Printf("serving the Widgets of namespace %q at %s (workload %s, QPS %g, burst %d, %d workers)", opts.Namespace, cfg.Host, opts.Workload, opts.QPS, opts.Burst, opts.Workers)
	return c.Start(ctx)
}
