package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestDaemonsMoveWithTheirObjects: when a second instance joins, the
// objects it now owns move, and so do their daemons: stopped on the first
// instance, then started on the second, never running on both at once.
func TestDaemonsMoveWithTheirObjects(t *testing.T) {
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var mu sync.Mutex
	running := map[string]string{} // object -> instance running its daemon
	starts := map[string][]string{}
	var overlaps []string
	newInstance := func(id string) *sdk.Handler {
		h := sdk.New("movers-daemon", append(handlerOpts(t), sdk.WithInstanceID(id))...)
		h.OnDaemon(widgets, func(ctx context.Context, ev *sdk.Event) error {
			mu.Lock()
			if other, ok := running[ev.Name]; ok {
				overlaps = append(overlaps, fmt.Sprintf("%s on %s and %s", ev.Name, other, id))
			}
			running[ev.Name] = id
			starts[ev.Name] = append(starts[ev.Name], id)
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			delete(running, ev.Name)
			mu.Unlock()
			return nil
		}, sdk.Namespaces(ns))
		return h
	}
	runHandler(t, newInstance("first"), addr)
	const n = 12
	createWidgets(t, cp, ns, n)
	eventually(t, "every daemon running on the first instance", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(running) == n
	})
	runHandler(t, newInstance("second"), addr)
	eventually(t, "some daemons moved to the second instance", func() bool {
		mu.Lock()
		defer mu.Unlock()
		moved := 0
		for _, who := range running {
			if who == "second" {
				moved++
			}
		}
		return moved > 0 && len(running) == n
	})
	mu.Lock()
	defer mu.Unlock()
	if len(overlaps) > 0 {
		t.Errorf("daemons ran on two instances at once: %v", overlaps)
	}
	for name, s := range starts {
		if len(s) > 2 {
			t.Errorf("daemon of %s started %d times (%v), want at most twice", name, len(s), s)
		}
	}
}
