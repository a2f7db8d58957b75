package lifecycle

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestAnAgedConnectionLetsADeliveryInFlightFinish: a connection past
// --grpc-max-connection-age is told GOAWAY; the delivery the handler is
// running then is acknowledged within the grace (once, never counted
// gone), and the SDK reconnects when the connection closes.
func TestAnAgedConnectionLetsADeliveryInFlightFinish(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	const age, grace = 2 * time.Second, 5 * time.Second
	addr, base := startBrokerWithMetrics(t, cp, func(o *broker.Options) {
		o.GRPCLimits = broker.GRPCLimits{MaxConnectionAge: age, MaxConnectionAgeGrace: grace}
	})
	handler := map[string]string{"handler": "aged"}
	var opened atomic.Int64 // unix nanoseconds
	var j journal
	h := sdk.New("aged", handlerOpts(t)...)
	// The delivery is still running when the GOAWAY is sent: the connection
	// opened before the session did, and gRPC's jitter adds at most 10%.
	h.OnCreate(widgets, j.record(func(ctx context.Context, _ *sdk.Event) error {
		select {
		case <-time.After(time.Until(time.Unix(0, opened.Load()).Add(age*11/10 + 500*time.Millisecond))):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), sdk.Namespaces(ns))
	runHandler(t, h, addr)
	eventually(t, "the first session", func() bool {
		n, _ := sumOf(metricFamilies(t, base+"/metrics"), "tether_sessions_total", handler)
		return n == 1
	})
	opened.Store(time.Now().UnixNano())
	create(t, dyn, widgetGVR, widget(ns, "slow", nil))
	j.waitCount(t, sdk.Create, "slow", 1)
	eventually(t, "a second session after the connection's age and grace", func() bool {
		f := metricFamilies(t, base+"/metrics")
		total, _ := sumOf(f, "tether_sessions_total", handler)
		now, _ := sumOf(f, "tether_sessions", handler)
		return total >= 2 && now == 1
	})
	f := metricFamilies(t, base+"/metrics")
	ok, _ := sumOf(f, "tether_deliveries_total", with(handler, "kind", "create", "outcome", "ok"))
	gone, _ := sumOf(f, "tether_deliveries_total", with(handler, "outcome", "gone"))
	if ok != 1 || gone != 0 {
		t.Errorf("create deliveries: %v ok, %v gone; want the one in flight at GOAWAY acknowledged once", ok, gone)
	}
	if n := len(j.find(sdk.Create, "slow")); n != 1 {
		t.Errorf("the handler ran the create %d times, want once", n)
	}
}
