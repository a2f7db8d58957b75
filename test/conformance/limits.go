package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

const (
	bigAnnotation = "conformance.tether.dev/big"
	// quietAfterBig is how long the stream must stay up after the FAIL: a
	// session the broker ended would be replaced within it.
	quietAfterBig = time.Second
)

// oversizedAnswer: the create of scenario big would carry a 5 MiB patch,
// over the broker's 4 MiB. The instance must answer FAIL instead, on the
// same stream; an ack that large would end the session.
func (k *kit) oversizedAnswer(ctx context.Context) error {
	k.wire.mu.Lock()
	streams := len(k.wire.streams)
	k.wire.mu.Unlock()
	if err := k.createWidget(ctx, "big", "big"); err != nil {
		return err
	}
	acks, err := k.awaitAcks(ctx, "big", tetherv1.DeliveryKind_DELIVERY_KIND_CREATE, 1)
	if err != nil {
		return err
	}
	if a := acks[0].a; a.GetOutcome() != tetherv1.Outcome_OUTCOME_FAIL || a.GetMessage() == "" || len(a.GetPatch()) > 0 {
		return fmt.Errorf("create acked %v (%q) with a %d-byte patch, want FAIL saying why, without the patch", a.GetOutcome(), a.GetMessage(), len(a.GetPatch()))
	}
	// Nothing to wait for but time: the stream is still up after it.
	if k.wire.await(ctx, quietAfterBig, func() bool {
		return len(k.wire.streams) > streams || k.wire.streams[streams-1].ended
	}) {
		return errors.New("the stream ended after the oversized answer")
	}
	return k.awaitWidget(ctx, "big", "with the create handled and no "+bigAnnotation, func(o *unstructured.Unstructured) bool {
		_, big := o.GetAnnotations()[bigAnnotation]
		return !big
	})
}

const (
	largeAnnotation = "conformance.tether.dev/large"
	// largeMessage is the size a handler should take in one message from
	// the broker (conn.receive); the kit's delivery comes just under it.
	largeMessage = 32 << 20
)

// largeDelivery sends the handler a made-up create of scenario ok whose
// object is just under 32 MiB: the handler must take it on the same
// stream and ack it OK.
func (k *kit) largeDelivery(ctx context.Context) error {
	k.wire.mu.Lock()
	s := k.wire.liveStreamLocked()
	k.wire.mu.Unlock()
	if s == nil {
		return errors.New("no session going on to send a delivery on")
	}
	msg := madeUpCreate("create", "large", "ok", map[string]string{largeAnnotation: ""})
	room := largeMessage - 4096 - proto.Size(msg)
	msg = madeUpCreate("create", "large", "ok", map[string]string{largeAnnotation: strings.Repeat("x", room)})
	if err := k.wire.inject(s, msg); err != nil {
		return err
	}
	a, err := k.awaitAckOf(ctx, s, msg.GetDelivery().GetId())
	if err != nil {
		return fmt.Errorf("a %d-byte delivery: %w", proto.Size(msg), err)
	}
	if a.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
		return fmt.Errorf("the %d-byte delivery was acked %v (%q), want OK", proto.Size(msg), a.GetOutcome(), a.GetMessage())
	}
	return nil
}
