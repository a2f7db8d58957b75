package session

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// gather is what the sender writes for first: first itself, or, for an
// instance that takes DeliveryBatch, first with the deliveries already
// waiting behind it on more as one batch. It never waits: a batch holds
// only what was ready, so that no delivery is held back for company. A
// message that is not a delivery, or one that would take the batch past
// its bounds, ends the gathering and comes back as next, to be written
// after the batch, so that the order of messages stays the order taken.
func gather(first *tetherv1.ConnectResponse, more <-chan *tetherv1.ConnectResponse) (msg, next *tetherv1.ConnectResponse) {
	d := first.GetDelivery()
	if d == nil {
		return first, nil
	}
	var batch []*tetherv1.Delivery
	size := 0 // of the batch's encoding so far
	for len(batch) < tetherv1.MaxDeliveryBatch {
		var m *tetherv1.ConnectResponse
		select {
		case m = <-more:
		default:
		}
		if m == nil {
			break
		}
		if m.GetDelivery() == nil {
			next = m
			break
		}
		if batch == nil {
			// Sized only once there is a second: a delivery alone, the
			// common case when the instance keeps up, costs nothing more.
			batch, size = []*tetherv1.Delivery{d}, entrySize(d)
		}
		n := entrySize(m.GetDelivery())
		if size+n > tetherv1.MaxDeliveryBatchBytes {
			next = m
			break
		}
		batch, size = append(batch, m.GetDelivery()), size+n
	}
	if len(batch) < 2 {
		return first, next
	}
	return &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_DeliveryBatch{
		DeliveryBatch: &tetherv1.DeliveryBatch{Deliveries: batch}}}, next
}

// entrySize is what d adds to a DeliveryBatch's encoding: its tag, its
// length and itself.
func entrySize(d *tetherv1.Delivery) int {
	n := proto.Size(d)
	return protowire.SizeTag(1) + protowire.SizeBytes(n)
}

// write sends msg on the instance's stream, with the deliveries waiting
// behind it when the instance takes batches (gather).
func (in *Instance) write(stream tetherv1.BrokerService_ConnectServer, msg *tetherv1.ConnectResponse) error {
	batches := in.Capabilities.Has(tetherv1.Capability_CAPABILITY_DELIVERY_BATCH)
	for msg != nil {
		var next *tetherv1.ConnectResponse
		if batches {
			msg, next = gather(msg, in.send)
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		msg = next
	}
	return nil
}
