package session

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// gather is what the sender writes for first: first itself, or, for an
// instance that takes DeliveryBatch, first with the deliveries waiting
// behind it on more as one batch. Until linger fires (nil: not at all) it
// also waits for deliveries to come, so that a handler sent changes one
// by one, as a cluster makes them, reads and acks several at once; an
// admission review ends that wait, as it must not wait. A message that is
// not a delivery, or one that would take the batch past its bounds, ends
// the gathering and comes back as next, to be written after the batch, so
// that the order of messages stays the order taken.
func gather(first *tetherv1.ConnectResponse, more <-chan *tetherv1.ConnectResponse, linger <-chan time.Time) (msg, next *tetherv1.ConnectResponse) {
	d := first.GetDelivery()
	if d == nil {
		return first, nil
	}
	var batch []*tetherv1.Delivery
	size := 0 // of the batch's encoding so far
	for len(batch) < tetherv1.MaxDeliveryBatch {
		m := nextToSend(more, linger)
		if m == nil {
			break
		}
		if m.GetDelivery() == nil {
			next = m
			break
		}
		if isReview(m.GetDelivery()) {
			linger = nil
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
	return deliveryMessage(batch), next
}

// nextToSend is the next message on more: what waits, or with linger (nil:
// none) what comes before it fires; nil when there is none. What waits is
// taken first, so that a linger that has fired still leaves nothing ready
// behind.
func nextToSend(more <-chan *tetherv1.ConnectResponse, linger <-chan time.Time) *tetherv1.ConnectResponse {
	select {
	case m := <-more:
		return m
	default:
	}
	if linger == nil {
		return nil
	}
	select {
	case m := <-more:
		return m
	case <-linger:
		return nil
	}
}

// entrySize is what d adds to a DeliveryBatch's encoding: its tag, its
// length and itself.
func entrySize(d *tetherv1.Delivery) int {
	n := proto.Size(d)
	return protowire.SizeTag(1) + protowire.SizeBytes(n)
}

// write sends msg on the instance's stream, with the deliveries waiting
// behind it, or coming within the instance's linger, when the instance
// takes batches (gather); what the fence keeps back is not sent
// (sendable).
func (in *Instance) write(stream tetherv1.BrokerService_ConnectServer, msg *tetherv1.ConnectResponse) error {
	batches := in.Capabilities.Has(tetherv1.Capability_CAPABILITY_DELIVERY_BATCH)
	for msg != nil {
		var next *tetherv1.ConnectResponse
		if batches {
			msg, next = in.gather(msg)
		}
		if msg = in.sendable(msg); msg != nil {
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		msg = next
	}
	return nil
}

// gather is gather of msg and the messages waiting on the instance's
// queue, with its linger when msg lingers.
func (in *Instance) gather(msg *tetherv1.ConnectResponse) (batch, next *tetherv1.ConnectResponse) {
	if !in.lingers(msg) {
		return gather(msg, in.send, nil)
	}
	t := time.NewTimer(in.linger)
	defer t.Stop()
	return gather(msg, in.send, t.C)
}

// lingers says whether the sender waits with msg for more deliveries: a
// lifecycle delivery alone in flight to an instance that has a linger and
// a free slot for another (with none, nothing could come). With others in
// flight it does not wait: what comes while this message is written goes
// in the next one anyway, and each delivery it held would hold a
// dispatcher's worker waiting for its ack. When every worker waits so,
// the wait caps the pace (a handler's 64 workers, ticked 10,000 times a
// second, fell 9% behind with a 5 ms wait on every message).
func (in *Instance) lingers(msg *tetherv1.ConnectResponse) bool {
	d := msg.GetDelivery()
	return in.linger > 0 && d != nil && !isReview(d) && in.win.alone()
}
