package lifecycle

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// BenchmarkInstancesScale measures create throughput with 1, 2 and 4
// instances of one handler whose function takes 10 ms per event, each
// instance working one event at a time (window 1), so that the handler, not
// the API server, is what limits: more instances must handle more objects
// per second, up to what the one machine's API server and broker can write. Run it with
//
//	go test -run '^$' -bench InstancesScale -benchtime 1x ./test/lifecycle/
//
// b.N is ignored beyond 1: each run handles 400 objects created before the
// instances connect (so the first instance to connect gets a head start of
// a few milliseconds), and objects/s is reported as a metric, so the output
// is a table of the three.
func BenchmarkInstancesScale(b *testing.B) {
	const objects, delay, window = 400, 10 * time.Millisecond, 1
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			cp := controlplane.Get(b)
			cp.EnsureWidgetCRD(b)
			ns := cp.Namespace(b)
			// The broker's client must not be the bottleneck being measured.
			addr := startBroker(b, cp, func(o *broker.Options) { o.Config.QPS, o.Config.Burst = 2000, 4000 })
			// The objects exist before any instance connects, so the run
			// measures handling, not creating.
			createWidgets(b, cp, ns, objects)
			var handled atomic.Int64
			all := make(chan struct{})
			var handlers []*sdk.Handler
			for i := range n {
				h := sdk.New("scale", sdk.WithInsecure(), sdk.WithWindow(window), sdk.WithInstanceID(fmt.Sprintf("s%d", i)),
					sdk.WithLogger(hclog.NewNullLogger()))
				h.OnCreate(widgets, func(ctx context.Context, ev *sdk.Event) error {
					select {
					case <-time.After(delay):
					case <-ctx.Done():
						return ctx.Err()
					}
					if handled.Add(1) == objects {
						close(all)
					}
					return nil
				}, sdk.Namespaces(ns))
				handlers = append(handlers, h)
			}
			b.ResetTimer()
			start := time.Now()
			for _, h := range handlers {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { _ = h.Run(ctx, addr); close(done) }()
				b.Cleanup(func() { cancel(); <-done })
			}
			select {
			case <-all:
			case <-time.After(5 * time.Minute):
				b.Fatalf("only %d of %d objects handled", handled.Load(), objects)
			}
			took := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(objects)/took.Seconds(), "objects/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
