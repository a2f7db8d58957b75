package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

const (
	// undeclaredBinding is a binding id the handler's spec does not
	// declare, for the delivery the kit makes up (ack.one).
	undeclaredBinding = "conformance-undeclared"
	cancelledName     = "cancelled"
	cancelReason      = "conformance: the kit cancels this delivery"
)

// ackOne sends the handler a delivery for a binding it did not declare,
// which it must answer FAIL saying so, then judges every stream so far:
// no delivery acked twice, no ack for a delivery the stream did not
// carry, and every delivery of the session going on answered.
func (k *kit) ackOne(ctx context.Context) error {
	k.wire.mu.Lock()
	s := k.wire.liveStreamLocked()
	k.wire.mu.Unlock()
	if s == nil {
		return errors.New("no session going on to send a delivery on")
	}
	msg := madeUpCreate(undeclaredBinding, "undeclared", "ok", nil)
	if err := k.wire.inject(s, msg); err != nil {
		return err
	}
	a, err := k.awaitAckOf(ctx, s, msg.GetDelivery().GetId())
	if err != nil {
		return fmt.Errorf("a delivery for the undeclared binding %q: %w", undeclaredBinding, err)
	}
	if a.GetOutcome() != tetherv1.Outcome_OUTCOME_FAIL || a.GetMessage() == "" {
		return fmt.Errorf("the delivery for the undeclared binding %q was acked %v (%q), want FAIL saying why", undeclaredBinding, a.GetOutcome(), a.GetMessage())
	}
	if !k.wire.await(ctx, waitFor, func() bool { return unanswered(s) == nil }) {
		k.wire.mu.Lock()
		defer k.wire.mu.Unlock()
		d := unanswered(s)
		return fmt.Errorf("the %v delivery of widget %s (attempt %d) is not acked %v after it was sent", d.d.GetKind(), d.d.GetRef().GetName(), d.d.GetAttempt(), waitFor)
	}
	k.wire.mu.Lock()
	defer k.wire.mu.Unlock()
	return oneAckEach(k.wire.streams)
}

// deliveryBatch sends the handler, when its Hello lists
// CAPABILITY_DELIVERY_BATCH, two deliveries for a binding it did not declare
// in one DeliveryBatch: each must be acked FAIL, as it would be alone. A
// handler that does not list it is sent no batch, by the kit or the broker.
func (k *kit) deliveryBatch(ctx context.Context) error {
	k.wire.mu.Lock()
	s := k.wire.liveStreamLocked()
	k.wire.mu.Unlock()
	if s == nil {
		return errors.New("no session going on to send a batch on")
	}
	if !slices.Contains(s.hello.GetCapabilities(), tetherv1.Capability_CAPABILITY_DELIVERY_BATCH) {
		return nil
	}
	first, second := madeUpCreate(undeclaredBinding, "batched-1", "ok", nil), madeUpCreate(undeclaredBinding, "batched-2", "ok", nil)
	batch := &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_DeliveryBatch{DeliveryBatch: &tetherv1.DeliveryBatch{
		Deliveries: []*tetherv1.Delivery{first.GetDelivery(), second.GetDelivery()}}}}
	if err := k.wire.inject(s, batch); err != nil {
		return err
	}
	for i, d := range batch.GetDeliveryBatch().GetDeliveries() {
		a, err := k.awaitAckOf(ctx, s, d.GetId())
		if err != nil {
			return fmt.Errorf("delivery %d of a DeliveryBatch: %w", i+1, err)
		}
		if a.GetOutcome() != tetherv1.Outcome_OUTCOME_FAIL {
			return fmt.Errorf("delivery %d of a DeliveryBatch, for the undeclared binding %q, was acked %v (%q), want FAIL as alone",
				i+1, undeclaredBinding, a.GetOutcome(), a.GetMessage())
		}
	}
	return nil
}

// unanswered is the first delivery of s not acked yet, nil when none; the
// wire's lock must be held.
func unanswered(s *stream) *delivery {
	for i, d := range s.deliveries {
		if _, ok := s.acks[d.d.GetId()]; !ok {
			return &s.deliveries[i]
		}
	}
	return nil
}

// oneAckEach fails when a stream carried an ack for a delivery it had
// acked already, or for one it never carried, or an ack without an
// outcome, or an AckBatch where the capability was not listed by both
// sides ([ack.batch]).
func oneAckEach(streams []*stream) error {
	var bad []string
	for i, s := range streams {
		if s.unofferedBatches > 0 {
			bad = append(bad, fmt.Sprintf("session %d: %d AckBatch messages, though the Hello or the Welcome the handler got did not list CAPABILITY_ACK_BATCH", i+1, s.unofferedBatches))
		}
		for id, a := range s.acks {
			if a.a.GetOutcome() == tetherv1.Outcome_OUTCOME_UNSPECIFIED {
				bad = append(bad, fmt.Sprintf("session %d: the ack for the delivery %s has no outcome", i+1, id))
			}
		}
		for _, a := range s.extraAcks {
			why := "not sent on that stream"
			if _, ok := s.acks[a.GetDeliveryId()]; ok {
				why = "acked before"
			}
			bad = append(bad, fmt.Sprintf("session %d: an ack (%v) for the delivery %s, %s", i+1, a.GetOutcome(), a.GetDeliveryId(), why))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// cancel creates a slow widget and, while the handler runs its create,
// sends it a Cancel for that delivery as the broker does: the handler must
// still ack it. The broker, which did not cancel it, takes that ack as
// any other (a RETRY is sent again, and the widget's create done then).
func (k *kit) cancel(ctx context.Context) error {
	if err := k.createWidget(ctx, cancelledName, "slow"); err != nil {
		return err
	}
	var s *stream
	var id string
	if !k.wire.await(ctx, waitFor, func() bool {
		for _, x := range k.wire.streams {
			for _, d := range x.deliveries {
				if d.d.GetRef().GetName() == cancelledName && d.d.GetKind() == tetherv1.DeliveryKind_DELIVERY_KIND_CREATE {
					s, id = x, d.d.GetId()
					return true
				}
			}
		}
		return false
	}) {
		return fmt.Errorf("no create of widget %s within %v", cancelledName, waitFor)
	}
	k.wire.mu.Lock()
	_, answered := s.acks[id]
	k.wire.mu.Unlock()
	if answered {
		return errors.New("the handler acked the slow create at once, before the kit could cancel it: nothing to judge")
	}
	msg := &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Cancel{Cancel: &tetherv1.Cancel{DeliveryId: id, Reason: cancelReason}}}
	if err := k.wire.inject(s, msg); err != nil {
		return err
	}
	if _, err := k.awaitAckOf(ctx, s, id); err != nil {
		return fmt.Errorf("cancelled: %w", err)
	}
	// Let the broker finish the widget's create, so that no attempt of it
	// is left to cross the scenarios that follow.
	return k.wire.awaitErr(ctx, "widget "+cancelledName+"'s create answered other than RETRY", func() bool {
		_, acks := k.wire.exchangesLocked(cancelledName, tetherv1.DeliveryKind_DELIVERY_KIND_CREATE)
		last := acks[len(acks)-1].a
		return last != nil && last.GetOutcome() != tetherv1.Outcome_OUTCOME_RETRY
	})
}
