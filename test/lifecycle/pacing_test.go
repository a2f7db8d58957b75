package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestReleaseThatWaitedForAPlaceIsOneWrite: the releases of many deleted
// objects wait for the handler's one place in flight, and land in later
// passes. When the hold was the last finalizer, the API server deletes the
// object and answers with it as it was, hold and all: that answer must not
// make the pass release the hold a second time, of an object already gone.
func TestReleaseThatWaitedForAPlaceIsOneWrite(t *testing.T) {
	const n = 8
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr, metricsURL := startBrokerWithMetrics(t, cp, func(o *broker.Options) {
		o.Workers = 2 // one place in flight
		o.WriteQPS, o.WriteBurst = 1000, 1000
	})
	h := sdk.New("paced", handlerOpts(t)...)
	h.OnDelete(widgets, func(context.Context, *sdk.Event) error { return nil }, sdk.Namespaces(ns))
	runHandler(t, h, addr)
	for i := range n {
		name := fmt.Sprintf("w-%d", i)
		create(t, dyn, widgetGVR, widget(ns, name, map[string]any{"size": int64(1)}))
		waitObject(t, dyn, widgetGVR, ns, name, "held", heldBy("paced"))
	}
	for i := range n {
		del(t, dyn, widgetGVR, ns, fmt.Sprintf("w-%d", i))
	}
	for i := range n {
		waitObject(t, dyn, widgetGVR, ns, fmt.Sprintf("w-%d", i), "gone", gone)
	}
	writes := func(code string) float64 {
		v, _ := sumOf(metricFamilies(t, metricsURL+"/metrics"), "tether_api_writes_total",
			map[string]string{"resource": "widgets.test.tether.dev", "code": code})
		return v
	}
	if ok := writes("ok"); ok != 2*n {
		t.Errorf("%v writes answered ok, want %d: a hold and a release per Widget", ok, 2*n)
	}
	if gone := writes("not-found"); gone != 0 {
		t.Errorf("%v writes found their Widget gone: a release was written again after the one that deleted it", gone)
	}
}

// TestDeliveryUnansweredWithinItsTimeoutIsTriedAgain: a create function
// that does not return within its binding's timeout is told to cancel, and
// the broker delivers the create again after the backoff.
//
// The first attempt ignores its context and returns when the test ends,
// after the second came. One that returned nil when its context ended, at
// the delivery's deadline, would race the broker's own timeout with an OK
// ack, and on a loaded machine the ack sometimes won.
func TestDeliveryUnansweredWithinItsTimeoutIsTriedAgain(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)
	attempts := make(chan int, 4)
	ended := make(chan struct{})
	h := sdk.New("slow", handlerOpts(t)...)
	h.OnCreate(widgets, func(_ context.Context, ev *sdk.Event) error {
		attempts <- ev.Attempt
		if ev.Attempt == 1 {
			<-ended // past the timeout: only the broker's wait can end
		}
		return nil
	}, sdk.Namespaces(ns), sdk.Timeout(300*time.Millisecond), sdk.Backoff(100*time.Millisecond, time.Second))
	defer close(ended) // before the handler stops, at cleanup
	runHandler(t, h, addr)
	create(t, dyn, widgetGVR, widget(ns, "w", map[string]any{"size": int64(1)}))
	for want := 1; want <= 2; want++ {
		select {
		case got := <-attempts:
			if got != want {
				t.Fatalf("attempt %d delivered, want %d", got, want)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("no attempt %d within %v", want, waitTimeout)
		}
	}
}
