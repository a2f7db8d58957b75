package session

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// TestAFencedDeliveryIsNotSentButAReviewIs: while the fence says no, a
// lifecycle delivery returns ErrFenced, wrapping the fence's reason, without
// reaching the instance or keeping its window slot; a review needs no
// leadership and goes through.
func TestAFencedDeliveryIsNotSentButAReviewIs(t *testing.T) {
	lapsed := errors.New("tenure lapsed")
	var fenced atomic.Bool
	h := start(t, Options{Supported: AllKinds, Fence: func() error {
		if fenced.Load() {
			return lapsed
		}
		return nil
	}})
	validate := func(hl *tetherv1.Hello) {
		hl.Bindings = append(hl.Bindings, &tetherv1.Binding{Id: "check", Kind: tetherv1.BindingKind_BINDING_KIND_VALIDATE,
			Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"}})
	}
	c, in := h.session(t, withWindow(1), validate)

	fenced.Store(true)
	if r := await(t, deliver(context.Background(), in, "fenced")); !errors.Is(r.err, ErrFenced) || !errors.Is(r.err, lapsed) {
		t.Fatalf("Deliver = %v, %v; want ErrFenced wrapping the fence's error", r.ack, r.err)
	}
	if n := in.InFlight(); n != 0 {
		t.Errorf("%d deliveries in flight after a fenced one, want 0", n)
	}
	review := make(chan result, 1)
	go func() {
		ack, err := in.Deliver(context.Background(), &tetherv1.Delivery{Id: "review", BindingId: "check", Kind: tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION})
		review <- result{"review", ack, err}
	}()
	// The first message the instance gets is the review: nothing of the
	// fenced delivery reached it.
	if d := c.delivery(); d.GetId() != "review" {
		t.Fatalf("delivery %s, want the review", d.GetId())
	}
	c.ack("review", tetherv1.Outcome_OUTCOME_OK)
	if r := await(t, review); r.err != nil {
		t.Fatalf("review: %v", r.err)
	}

	fenced.Store(false)
	after := deliver(context.Background(), in, "after")
	if d := c.delivery(); d.GetId() != "after" {
		t.Fatalf("delivery %s, want after, once the fence lets it through", d.GetId())
	}
	c.ack("after", tetherv1.Outcome_OUTCOME_OK)
	await(t, after)
}
