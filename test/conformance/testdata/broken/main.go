// Command broken is a handler that breaks five rules of docs/protocol.md on
// purpose, for the kit's own test: it answers the retry scenario RETRY
// without its retry_after, forever (ack.retry), the fail scenario OK
// (ack.fail), and its timer's ticks FAIL (timer.ack), its daemon of
// scenario exit fails where it should return (daemon.exited), and its
// daemon of scenario session beats on for 3 s after it is stopped, the
// session over (daemon.session). Everything else it answers as the spec
// says.
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
	h := sdk.New(os.Getenv("TETHER_HANDLER"), sdk.WithInsecure())
	ns := sdk.Namespaces(os.Getenv("TETHER_NAMESPACE"))
	h.OnCreate(widgets, create, sdk.ID("create"), ns)
	h.OnDelete(widgets, func(context.Context, *sdk.Event) error { return nil }, sdk.ID("delete"), ns)
	h.OnTimer(widgets, 500*time.Millisecond, func(context.Context, *sdk.Event) error {
		return sdk.Permanent(errors.New("broken: a tick fails"))
	}, sdk.ID("tick"), ns, sdk.Labels("conformance.tether.dev/timer=yes"))
	h.OnDaemon(widgets, func(ctx context.Context, ev *sdk.Event) error {
		switch scenario(ev.Object().Object) {
		case "exit":
			return errors.New("broken: the daemon that should return fails")
		case "session":
			return beatPastStop(ctx)
		}
		<-ctx.Done()
		time.Sleep(500 * time.Millisecond) // the spec's cleanup
		return nil
	}, sdk.ID("daemon"), ns, sdk.Labels("conformance.tether.dev/daemon=yes"), sdk.CancellationTimeout(10*time.Second))
	admission := sdk.Labels("conformance.tether.dev/admission=yes")
	h.OnValidate(widgets, func(_ context.Context, r *sdk.Review) error {
		if scenario(r.Object.Object) == "deny" {
			return sdk.Deny("conformance: denied")
		}
		return nil
	}, sdk.ID("validate"), ns, admission)
	h.OnMutate(widgets, func(_ context.Context, r *sdk.Review) error {
		if scenario(r.Object.Object) == "mutate" {
			labels := r.Object.GetLabels()
			labels["conformance.tether.dev/mutated"] = "yes"
			r.Object.SetLabels(labels)
		}
		return nil
	}, sdk.ID("mutate"), ns, admission)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := h.Run(ctx, os.Getenv("TETHER_BROKER")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func scenario(obj map[string]any) string {
	spec, _ := obj["spec"].(map[string]any)
	s, _ := spec["scenario"].(string)
	return s
}

func create(ctx context.Context, ev *sdk.Event) error {
	switch scenario(ev.Object().Object) {
	case "ok":
		ev.SetResult(map[string]any{"scenario": "ok"})
	case "retry":
		return errors.New("broken: retry, with no retry_after")
	case "patch":
		ev.SetLabel("conformance.tether.dev/patched", "yes")
		ev.PatchStatus(map[string]any{"phase": "Patched"})
	case "big":
		ev.SetAnnotation("conformance.tether.dev/big", strings.Repeat("x", 5<<20))
	case "events":
		// It cannot break cap.use: the SDK drops the Event for a broker
		// without handler Events (judges_test.go fails an ack that keeps it).
		ev.Record(sdk.Normal, "Conformance", "conformance: an Event")
	case "slow":
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	case "held":
		// As the spec says: until release-<name> is in the kit's folder.
		path := filepath.Join(os.Getenv("TETHER_CONFORMANCE_DIR"), "release-"+ev.Name)
		for _, err := os.Stat(path); err != nil; _, err = os.Stat(path) {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// beatPastStop beats as the spec says, but goes on for 3 s after ctx ends:
// a daemon that ignores its cancellation outlives its session.
func beatPastStop(ctx context.Context) error {
	f, err := os.CreateTemp(os.Getenv("TETHER_CONFORMANCE_DIR"), "session-")
	if err != nil {
		return fmt.Errorf("creating the daemon's beat file: %w", err)
	}
	defer f.Close()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	done, stopped := ctx.Done(), (<-chan time.Time)(nil)
	for {
		if _, err := f.WriteString("beat\n"); err != nil {
			return fmt.Errorf("beating: %w", err)
		}
		select {
		case <-done:
			done, stopped = nil, time.After(3*time.Second)
		case <-stopped:
			return nil
		case <-t.C:
		}
	}
}
