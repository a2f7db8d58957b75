// Command go is the Go SDK's handler for the conformance kit: the bindings
// and answers of test/conformance/README.md, on the Go SDK.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tether-dev/tether/sdk"
)

var widgets = sdk.GVR("test.tether.dev", "v1", "widgets")

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	opts := []sdk.Option{}
	if os.Getenv("TETHER_INSECURE") == "true" {
		opts = append(opts, sdk.WithInsecure())
	}
	h := sdk.New(os.Getenv("TETHER_HANDLER"), opts...)
	ns := sdk.Namespaces(os.Getenv("TETHER_NAMESPACE"))
	h.OnCreate(widgets, create, sdk.ID("create"), ns)
	h.OnDelete(widgets, func(context.Context, *sdk.Event) error { return nil }, sdk.ID("delete"), ns)
	h.OnTimer(widgets, 500*time.Millisecond, tick, sdk.ID("tick"), ns, sdk.Labels("conformance.tether.dev/timer=yes"))
	h.OnDaemon(widgets, daemon, sdk.ID("daemon"), ns, sdk.Labels("conformance.tether.dev/daemon=yes"),
		sdk.CancellationTimeout(10*time.Second))
	h.OnValidate(widgets, validate, sdk.ID("validate"), ns, sdk.Labels("conformance.tether.dev/admission=yes"))
	h.OnMutate(widgets, mutate, sdk.ID("mutate"), ns, sdk.Labels("conformance.tether.dev/admission=yes"))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return h.Run(ctx, os.Getenv("TETHER_BROKER"))
}

// create answers by the widget's spec.scenario.
func create(ctx context.Context, ev *sdk.Event) error {
	scenario, _, _ := unstructuredString(ev, "spec", "scenario")
	switch scenario {
	case "ok":
		ev.SetResult(map[string]any{"scenario": "ok"})
	case "retry":
		if ev.Attempt == 1 {
			return sdk.RetryAfter(errors.New("conformance: try again"), time.Second)
		}
		ev.SetResult(map[string]any{"attempt": ev.Attempt})
	case "fail":
		return sdk.Permanent(errors.New("conformance: permanent failure"))
	case "patch":
		ev.SetLabel("conformance.tether.dev/patched", "yes")
		ev.PatchStatus(map[string]any{"phase": "Patched"})
	case "big":
		ev.SetAnnotation("conformance.tether.dev/big", strings.Repeat("x", 5<<20))
	case "events":
		ev.Record(sdk.Normal, "Conformance", "conformance: an Event")
	case "slow":
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	case "held":
		return awaitRelease(ctx, ev.Name)
	}
	return nil
}

// awaitRelease returns once the kit has released the create of widget
// name: the file release-<name> is in $TETHER_CONFORMANCE_DIR. It looks
// every 20 ms, and gives up waiting after 30 s.
func awaitRelease(ctx context.Context, name string) error {
	path := filepath.Join(os.Getenv("TETHER_CONFORMANCE_DIR"), "release-"+name)
	look := time.NewTicker(20 * time.Millisecond)
	defer look.Stop()
	giveUp := time.After(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-look.C:
		case <-giveUp:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func tick(_ context.Context, ev *sdk.Event) error {
	ev.SetResult(map[string]any{"ticked": true})
	return nil
}

// daemon runs until stopped, then takes half a second to clean up; for
// scenario exit it returns at once, and for scenario session it beats while
// it runs.
func daemon(ctx context.Context, ev *sdk.Event) error {
	switch s, _, _ := unstructuredString(ev, "spec", "scenario"); s {
	case "exit":
		return nil
	case "session":
		if err := beat(ctx); err != nil {
			return err
		}
	}
	<-ctx.Done()
	time.Sleep(500 * time.Millisecond)
	return nil
}

// beat appends a line to a new file of $TETHER_CONFORMANCE_DIR every
// 100 ms until ctx ends, so that the kit sees when the daemon stops.
func beat(ctx context.Context) error {
	f, err := os.CreateTemp(os.Getenv("TETHER_CONFORMANCE_DIR"), "session-")
	if err != nil {
		return fmt.Errorf("creating the daemon's beat file: %w", err)
	}
	defer f.Close()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := f.WriteString("beat\n"); err != nil {
			return fmt.Errorf("beating: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func validate(_ context.Context, r *sdk.Review) error {
	if s, _, _ := nestedString(r.Object.Object, "spec", "scenario"); s == "deny" {
		return sdk.Deny("conformance: denied")
	}
	return nil
}

func mutate(_ context.Context, r *sdk.Review) error {
	if s, _, _ := nestedString(r.Object.Object, "spec", "scenario"); s == "mutate" {
		labels := r.Object.GetLabels()
		labels["conformance.tether.dev/mutated"] = "yes"
		r.Object.SetLabels(labels)
	}
	return nil
}

func unstructuredString(ev *sdk.Event, path ...string) (string, bool, error) {
	return nestedString(ev.Object().Object, path...)
}

func nestedString(obj map[string]any, path ...string) (string, bool, error) {
	for _, p := range path[:len(path)-1] {
		m, ok := obj[p].(map[string]any)
		if !ok {
			return "", false, nil
		}
		obj = m
	}
	s, ok := obj[path[len(path)-1]].(string)
	return s, ok, nil
}
