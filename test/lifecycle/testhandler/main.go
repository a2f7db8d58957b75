// Command testhandler is a handler the end-to-end tests run as a real
// process, so that they can kill it with SIGKILL. It binds widgets (the
// test CRD) with a create and a delete binding, and prints one line per
// delivery to stdout ("CREATE ns/name", "DELETE ns/name") for the tests to
// follow.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/sdk"
)

func main() {
	addr := flag.String("broker", "127.0.0.1:7443", "broker address")
	name := flag.String("name", "testhandler", "handler name")
	ns := flag.String("namespace", "", "namespace to bind (default all)")
	strict := flag.Bool("strict", false, "the delete binding is STRICT")
	flag.Parse()

	h := sdk.New(*name, sdk.WithInsecure(),
		sdk.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{Name: *name, Output: os.Stderr})))
	widgets := sdk.GVR("test.tether.dev", "v1", "widgets")
	var opts []sdk.BindingOption
	if *ns != "" {
		opts = append(opts, sdk.Namespaces(*ns))
	}
	say := func(kind string) sdk.Func {
		return func(_ context.Context, ev *sdk.Event) error {
			fmt.Printf("%s %s/%s\n", kind, ev.Namespace, ev.Name)
			return nil
		}
	}
	h.OnCreate(widgets, say("CREATE"), opts...)
	delOpts := opts
	if *strict {
		delOpts = append(delOpts, sdk.Finalizer(sdk.FinalizerStrict))
	}
	h.OnDelete(widgets, say("DELETE"), delOpts...)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := h.Run(ctx, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "testhandler:", err)
		os.Exit(1)
	}
}
