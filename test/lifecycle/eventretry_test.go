package lifecycle

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestEventThatAsksToRetryIsRetried: an event binding's function that
// fails on a new object's first event is delivered that event again, and
// the broker lives on. (Found by the first chaos run: a handler stopped
// with SIGSTOP let an event delivery time out, and the broker panicked on
// the retry, since nothing had yet counted attempts for the object.)
func TestEventThatAsksToRetryIsRetried(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := freeAddr(t)
	b := startBrokerProcess(t, cp, addr, cp.Namespace(t))

	var mu sync.Mutex
	attempts := map[string][]int{} // event type -> attempts delivered
	h := sdk.New("eventretry", handlerOpts(t)...)
	h.OnEvent(widgets, func(_ context.Context, ev *sdk.Event) error {
		mu.Lock()
		defer mu.Unlock()
		attempts[ev.WatchType] = append(attempts[ev.WatchType], ev.Attempt)
		if ev.Attempt == 1 {
			return errors.New("not yet")
		}
		return nil
	}, sdk.Namespaces(ns))
	runHandler(t, h, addr)

	create(t, dyn, widgetGVR, widget(ns, "w", map[string]any{"size": int64(1)}))
	eventually(t, "the ADDED event delivered again after its retry", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts["ADDED"]) >= 2
	})
	select {
	case <-b.done:
		t.Fatalf("the broker exited:\n%s", b.out.Text())
	default:
	}
}
