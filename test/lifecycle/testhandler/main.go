// Command testhandler is a handler the end-to-end tests run as a real
// process, so that they can kill it with SIGKILL. It binds widgets (the
// test CRD) with a create and a delete binding, and prints one line per
// delivery to stdout ("CREATE ns/name", "DELETE ns/name") for the tests to
// follow. Flags add an event binding and make creates or deletes fail.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/sdk"
)

func main() {
	addr := flag.String("broker", "127.0.0.1:7443", "broker address")
	name := flag.String("name", "testhandler", "handler name")
	ns := flag.String("namespace", "", "namespaces to bind, comma-separated (default all)")
	strict := flag.Bool("strict", false, "the delete binding is STRICT")
	delay := flag.Duration("delay", 0, "how long each create takes")
	instance := flag.String("instance", "", "instance id (default: the SDK's)")
	events := flag.Bool("events", false, "add an event binding (prints \"EVENT type ns/name\")")
	failCreates := flag.Bool("fail-creates", false, "every create asks to be retried (prints \"CREATE-FAILED ns/name\")")
	deleteFails := flag.Int("delete-fails", 0, "the first N deliveries of each delete ask to be retried (prints \"DELETE-FAILED ns/name\")")
	retries := flag.Int("retries", 0, "retries of the delete binding (0: the broker's default)")
	labels := flag.String("labels", "", "label selector of every binding")
	setLabel := flag.String("set-label", "", "KEY=VALUE: each create sets this label on its object")
	resultBytes := flag.Int("result-bytes", 0, "each create sets a result of about this many bytes")
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
		bopts = append(bopts, sdk.Namespaces(strings.Split(*ns, ",")...))
	}
	if *labels != "" {
		bopts = append(bopts, sdk.Labels(*labels))
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
		if *failCreates {
			fmt.Printf("CREATE-FAILED %s/%s\n", ev.Namespace, ev.Name)
			return errors.New("create fails, as asked")
		}
		if k, v, ok := strings.Cut(*setLabel, "="); ok {
			ev.SetLabel(k, v)
		}
		if *resultBytes > 0 {
			ev.SetResult(strings.Repeat("r", *resultBytes))
		}
		return say("CREATE")(ctx, ev)
	}, bopts...)
	delOpts := slices.Clone(bopts)
	if *strict {
		delOpts = append(delOpts, sdk.Finalizer(sdk.FinalizerStrict))
	}
	if *retries > 0 {
		delOpts = append(delOpts, sdk.Retries(*retries))
	}
	var mu sync.Mutex
	deleteTries := map[string]int{}
	h.OnDelete(widgets, func(ctx context.Context, ev *sdk.Event) error {
		mu.Lock()
		deleteTries[ev.UID]++
		n := deleteTries[ev.UID]
		mu.Unlock()
		if n <= *deleteFails {
			fmt.Printf("DELETE-FAILED %s/%s\n", ev.Namespace, ev.Name)
			return errors.New("delete fails, as asked")
		}
		return say("DELETE")(ctx, ev)
	}, delOpts...)
	if *events {
		h.OnEvent(widgets, func(_ context.Context, ev *sdk.Event) error {
			fmt.Printf("EVENT %s %s/%s\n", ev.WatchType, ev.Namespace, ev.Name)
			return nil
		}, bopts...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := h.Run(ctx, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "testhandler:", err)
		os.Exit(1)
	}
}
