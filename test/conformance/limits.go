package main

import (
	"context"
	"errors"
	"fmt"
	"time"

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
