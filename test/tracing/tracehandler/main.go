// Command tracehandler is the Go handler test/tracing runs as a real
// process: it binds widgets with a create and a delete binding in one
// namespace and sends the spans of its functions to the OTLP endpoint the
// OTEL_* variables name, as a handler that traces would set itself up. It
// prints "CREATE ns/name" and "DELETE ns/name" for the test to follow, and
// on SIGTERM stops and sends the spans it still holds. With --validate it
// also reviews the widgets' creates (the broker needs --admission-listen),
// printing "REVIEW ns/name" and refusing those named deny-*.
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
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tracehandler:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("broker", "127.0.0.1:7443", "broker address")
	name := flag.String("name", "tracehandler", "handler name")
	ns := flag.String("namespace", "", "the namespace to bind")
	validate := flag.Bool("validate", false, "also review the widgets' creates: refuse those named deny-*")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// As the broker's: the exporter reads OTEL_EXPORTER_OTLP_ENDPOINT, the
	// resource OTEL_SERVICE_NAME, the batcher OTEL_BSP_SCHEDULE_DELAY.
	tp, err := tracing.ProviderFromEnv(ctx, *name)
	if err != nil {
		return err
	}
	if tp == nil {
		return fmt.Errorf("tracing is off: set OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	defer func() {
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(flush)
	}()

	h := sdk.New(*name, sdk.WithInsecure(), sdk.WithTracerProvider(tp),
		sdk.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{Name: *name, Level: hclog.Debug, Output: os.Stderr})))
	widgets := sdk.GVR("test.tether.dev", "v1", "widgets")
	say := func(kind string) sdk.Func {
		return func(_ context.Context, ev *sdk.Event) error {
			fmt.Printf("%s %s/%s\n", kind, ev.Namespace, ev.Name)
			return nil
		}
	}
	h.OnCreate(widgets, say("CREATE"), sdk.ID("create"), sdk.Namespaces(*ns))
	h.OnDelete(widgets, say("DELETE"), sdk.ID("delete"), sdk.Namespaces(*ns))
	if *validate {
		h.OnValidate(widgets, func(_ context.Context, r *sdk.Review) error {
			fmt.Printf("REVIEW %s/%s\n", r.Namespace, r.Name)
			if strings.HasPrefix(r.Name, "deny-") {
				return sdk.Deny("tracehandler refuses widgets named deny-*")
			}
			return nil
		}, sdk.ID("validate"), sdk.Namespaces(*ns), sdk.Operations(sdk.OpCreate))
	}
	return h.Run(ctx, *addr)
}
