package sdk_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// TestEachDeliveryOfABatchIsTakenAsAlone: the SDK lists
// CAPABILITY_DELIVERY_BATCH, and each delivery of a DeliveryBatch runs and
// is acked by itself; one for a binding it did not declare is acked FAIL
// without holding up the rest.
func TestEachDeliveryOfABatchIsTakenAsAlone(t *testing.T) {
	hs := newHarness(t, nil)
	h := sdk.New("secret-ttl", hs.options()...)
	var mu sync.Mutex
	var ran []string
	h.OnCreate(configMaps, func(_ context.Context, ev *sdk.Event) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, ev.Name)
		return nil
	})
	hs.run(h)
	s := hs.session()
	if !slices.Contains(s.hello.GetCapabilities(), tetherv1.Capability_CAPABILITY_DELIVERY_BATCH) {
		t.Fatalf("Hello lists %v, without CAPABILITY_DELIVERY_BATCH", s.hello.GetCapabilities())
	}
	undeclared := delivery("d3", func(d *tetherv1.Delivery) { d.BindingId = "undeclared" })
	s.send(t, &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_DeliveryBatch{DeliveryBatch: &tetherv1.DeliveryBatch{
		Deliveries: []*tetherv1.Delivery{delivery("d1"), delivery("d2"), undeclared}}}})
	outcomes := map[string]tetherv1.Outcome{}
	for range 3 {
		a := s.ack(t)
		outcomes[a.GetDeliveryId()] = a.GetOutcome()
	}
	want := map[string]tetherv1.Outcome{"d1": tetherv1.Outcome_OUTCOME_OK, "d2": tetherv1.Outcome_OUTCOME_OK, "d3": tetherv1.Outcome_OUTCOME_FAIL}
	for id, o := range want {
		if outcomes[id] != o {
			t.Errorf("delivery %s acked %v, want %v (all: %v)", id, outcomes[id], o, outcomes)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(ran)
	if !slices.Equal(ran, []string{"cm-d1", "cm-d2"}) {
		t.Errorf("ran for %v, want cm-d1 and cm-d2", ran)
	}
}
