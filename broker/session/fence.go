package session

import (
	"fmt"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// sendable is msg without what may no longer be sent, as the sender is
// about to write it; nil when nothing is left.
//
// The fence (Options.Fence) is looked at here, once per message, and not
// when Deliver hands a delivery over: a delivery may wait in the sender,
// for a linger or behind a slow stream, and a leader frozen meanwhile
// (SIGSTOP, a stalled VM) wakes with the wait over and its tenure gone by
// its own clock. When the fence says no, each lifecycle delivery of msg is
// answered ErrFenced instead of sent; its reviews, which need no
// leadership, still go. A Cancel of a delivery the instance was never
// sent (or has answered) is dropped.
func (in *Instance) sendable(msg *tetherv1.ConnectResponse) *tetherv1.ConnectResponse {
	if c := msg.GetCancel(); c != nil {
		if !in.win.holds(c.GetDeliveryId()) {
			return nil
		}
		return msg
	}
	ds := deliveriesOf(msg)
	if in.fence == nil || !hasLifecycle(ds) {
		return msg
	}
	err := in.fence()
	if err == nil {
		return msg
	}
	err = fmt.Errorf("%w: %w", ErrFenced, err)
	var reviews []*tetherv1.Delivery
	for _, d := range ds {
		if isReview(d) {
			reviews = append(reviews, d)
			continue
		}
		in.win.unsent(d.GetId(), err)
	}
	return deliveryMessage(reviews)
}

// deliveriesOf is the deliveries msg carries, alone or in a batch.
func deliveriesOf(msg *tetherv1.ConnectResponse) []*tetherv1.Delivery {
	if d := msg.GetDelivery(); d != nil {
		return []*tetherv1.Delivery{d}
	}
	return msg.GetDeliveryBatch().GetDeliveries()
}

// deliveryMessage carries ds: nil for none, a Delivery for one, else a
// DeliveryBatch.
func deliveryMessage(ds []*tetherv1.Delivery) *tetherv1.ConnectResponse {
	switch len(ds) {
	case 0:
		return nil
	case 1:
		return &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Delivery{Delivery: ds[0]}}
	}
	return &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_DeliveryBatch{
		DeliveryBatch: &tetherv1.DeliveryBatch{Deliveries: ds}}}
}

func isReview(d *tetherv1.Delivery) bool {
	return d.GetKind() == tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION
}

func hasLifecycle(ds []*tetherv1.Delivery) bool {
	for _, d := range ds {
		if !isReview(d) {
			return true
		}
	}
	return false
}
