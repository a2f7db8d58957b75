package sdk_test

import (
	"context"
	"runtime/metrics"
	"strconv"
	"testing"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// goroutinesCreated is how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A goroutine per delivery grows a fresh stack for nearly every delivery;
// deliveries one after another run on the same goroutine instead.
func TestDeliveriesOneAfterAnotherReuseAGoroutine(t *testing.T) {
	hs := newHarness(t, nil)
	h := sdk.New("secret-ttl", hs.options()...)
	h.OnCreate(configMaps, func(context.Context, *sdk.Event) error { return nil })
	hs.run(h)
	s := hs.session()
	s.deliver(t, delivery("warm"))
	s.ack(t)

	const n = 200
	before := goroutinesCreated()
	for i := range n {
		id := "d" + strconv.Itoa(i)
		s.deliver(t, delivery(id))
		if ack := s.ack(t); ack.GetDeliveryId() != id || ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
			t.Fatalf("ack = %v, want %s OK", ack, id)
		}
	}
	// The count is the process's: gRPC's transport and the goroutines
	// other tests left ending start some too, more on a loaded machine (22
	// were seen under a cluster's tests). A goroutine per delivery would
	// start n.
	if created := goroutinesCreated() - before; created > n/4 {
		t.Fatalf("%d deliveries one after another started %d goroutines, want at most %d", n, created, n/4)
	}
}
