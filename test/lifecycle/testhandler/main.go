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
	delay := flag.Duration("delay", 0, "how long each create takes")
	instance := flag.String("instance", "", "instance id (default: the SDK's)")
	flag.Parse()

	opts := []sdk.Option{sdk.WithInsecure()}
	if *instance != "" {
		opts = append(opts, sdk.WithInstanceID(*instance))
	}
	h := sdk.New(*name, append(opts,
		sdk.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{Name: *name, Output: os.Stderr})))...)
	widgets := sdk.GVR("test.tether.dev", "v1", "widgets")
	var bopts []sdk.BindingOption
	if *ns != "" {
		bopts = append(bopts, sdk.Namespaces(*ns))
	}
	say := func(kind string) sdk.Func {
		return func(_ context.Context, ev *sdk.Event) error {
			fmt.Printf("%s %s/%s\n", kind, ev.Namespace, ev.Name)
			return nil
		}
	}
	h.OnCreate(widgets, func(ctx context.Context, ev *sdk.Event) error {
		// START and END bracket the handling so tests can check that no two
		// instances handle one object at once.
		fmt.Printf("START %s %d\n", ev.UID, time.Now().UnixNano())
		select {
		case <-time.After(*delay):
		case <-ctx.Done():
			return ctx.Err()
		}
		fmt.Printf("END %s %d\n", ev.UID, time.Now().UnixNano())
		return say("CREATE")(ctx, ev)
	}, bopts...)
	delOpts := bopts
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
