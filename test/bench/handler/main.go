// Command handler is the Tether handler the create/delete benchmark
// (test/bench) runs as a separate process: a create binding and a delete
// binding, so every Widget is held with tether.dev/<name> until its
// deletion has been handled. The create binding does what -workload says
// (package test/bench/workload): result stores a small result
// (ev.SetResult), label sets a label (ev.SetLabel), status sets a status
// field (ev.PatchStatus). Its twin on the Python SDK is handler.py beside
// this file.
//
//	handler -addr 127.0.0.1:7443 -name bench -namespace bench-broker-1000 -window 64 -workload result
//
// With several comma-separated -addr, it dials the broker replicas in turn
// (sdk.RoundRobin), as the failover benchmark needs; with -reviews-namespace
// it also reviews the Widgets created there, on every replica.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/broker/tracing"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/bench/cpuprofile"
	"github.com/tether-dev/tether/test/bench/workload"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7443", "broker gRPC address HOST:PORT (insecure mode); several, comma-separated, are dialled in turn")
	name := flag.String("name", "bench", "handler name; the hold is tether.dev/<name>")
	namespace := flag.String("namespace", "", "namespace whose Widgets are handled (required)")
	window := flag.Int("window", 64, "deliveries handled at once")
	logLevel := flag.String("log-level", "warn", "log level: trace, debug, info, warn, error")
	labels := flag.String("labels", "", "label selector of both bindings (empty: every Widget of -namespace)")
	backoffMax := flag.Duration("backoff-max", time.Second, "longest wait between two connection attempts (the SDK's default is "+sdk.DefaultReconnectMax.String()+")")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this `file`")
	work := flag.String("workload", workload.Result, "what the create binding does: "+strings.Join(workload.All, ", "))
	reviews := flag.String("reviews-namespace", "", "namespace whose Widget creates a fail-open mutate binding reviews, labelling each "+workload.ReviewedKey+"=true (empty: no reviews)")
	flag.Parse()
	if *namespace == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "handler: -namespace is required and no arguments are accepted")
		os.Exit(2)
	}
	if err := workload.Check(*work); err != nil {
		fmt.Fprintln(os.Stderr, "handler: -workload:", err)
		os.Exit(2)
	}

	stopProfile, err := cpuprofile.Start(*cpuProfile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "handler:", err)
		os.Exit(1)
	}
	defer stopProfile()

	widgets := sdk.GVR("test.tether.dev", "v1", "widgets")
	addrs := strings.Split(*addr, ",")
	opts, stopTracing, err := options(*window, *backoffMax, *logLevel, addrs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "handler:", err)
		os.Exit(2)
	}
	defer stopTracing()
	h := sdk.New(*name, opts...)
	scope := []sdk.BindingOption{sdk.Namespaces(*namespace)}
	if *labels != "" {
		scope = append(scope, sdk.Labels(*labels))
	}
	h.OnCreate(widgets, create(*work), append(scope, sdk.ID("create"))...)
	h.OnDelete(widgets, func(context.Context, *sdk.Event) error { return nil },
		append(scope, sdk.ID("delete"))...)
	if *reviews != "" {
		h.OnMutate(widgets, review, sdk.Namespaces(*reviews), sdk.ID("review"),
			sdk.Operations(sdk.OpCreate), sdk.Failure(sdk.FailOpen))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := h.Run(ctx, addrs[0]); err != nil {
		fmt.Fprintln(os.Stderr, "handler:", err)
		stopProfile()
		os.Exit(1)
	}
}

// options are the SDK's options from the flags, and for the go-traced case
// (the OTEL_* variables set) a tracer provider that sends the spans of the
// handler's functions, under the broker's; the function returned flushes
// them.
func options(window int, backoffMax time.Duration, logLevel string, addrs []string) ([]sdk.Option, func(), error) {
	opts := []sdk.Option{
		sdk.WithInsecure(),
		sdk.WithWindow(window),
		sdk.WithReconnectBackoff(min(50*time.Millisecond, backoffMax), backoffMax),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{
			Name: "bench-handler", Level: hclog.LevelFromString(logLevel), Output: os.Stderr,
		})),
	}
	if len(addrs) > 1 {
		opts = append(opts, sdk.WithDialer(sdk.RoundRobin(addrs...)))
	}
	tp, err := tracing.ProviderFromEnv(context.Background(), "bench-handler")
	if err != nil || tp == nil {
		return opts, func() {}, err
	}
	return append(opts, sdk.WithTracerProvider(tp)), func() {
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(flush)
	}, nil
}

// review labels the Widget it admits, so that the failover benchmark can
// tell a create the handler reviewed from one its webhook let through.
func review(_ context.Context, r *sdk.Review) error {
	labels := r.Object.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[workload.ReviewedKey] = "true"
	r.Object.SetLabels(labels)
	return nil
}

// create is the create binding's function for workload work.
func create(work string) sdk.Func {
	switch work {
	case workload.Label:
		return func(_ context.Context, ev *sdk.Event) error {
			ev.SetLabel(workload.LabelKey, "true")
			return nil
		}
	case workload.Status:
		return func(_ context.Context, ev *sdk.Event) error {
			ev.PatchStatus(map[string]any{workload.StatusField: true})
			return nil
		}
	}
	return func(_ context.Context, ev *sdk.Event) error {
		ev.SetResult(map[string]any{"ok": true})
		return nil
	}
}
