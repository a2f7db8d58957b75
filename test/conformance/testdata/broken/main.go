// Command broken is a handler that breaks two rules of docs/protocol.md on
// purpose, for the kit's own test: it answers the retry scenario RETRY
// without its retry_after, forever (ack.retry), and the fail scenario OK
// (ack.fail). Everything else it answers as the spec says.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tether-dev/tether/sdk"
)

var widgets = sdk.GVR("test.tether.dev", "v1", "widgets")

func main() {
	h := sdk.New(os.Getenv("TETHER_HANDLER"), sdk.WithInsecure())
	ns := sdk.Namespaces(os.Getenv("TETHER_NAMESPACE"))
	h.OnCreate(widgets, create, sdk.ID("create"), ns)
	h.OnDelete(widgets, func(context.Context, *sdk.Event) error { return nil }, sdk.ID("delete"), ns)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := h.Run(ctx, os.Getenv("TETHER_BROKER")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func create(_ context.Context, ev *sdk.Event) error {
	spec, _ := ev.Object().Object["spec"].(map[string]any)
	switch spec["scenario"] {
	case "ok":
		ev.SetResult(map[string]any{"scenario": "ok"})
	case "retry":
		return errors.New("broken: retry, with no retry_after")
	case "patch":
		ev.SetLabel("conformance.tether.dev/patched", "yes")
		ev.PatchStatus(map[string]any{"phase": "Patched"})
	}
	return nil
}
