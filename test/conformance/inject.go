package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// injected numbers the deliveries the kit makes up; their ids cannot
// match one of the broker's, so the broker ignores their acks.
var injected atomic.Int64

// inject sends msg to the handler on s as if the broker had, and records a
// delivery as the broker's are. The broker never hears of it: the ack the
// handler sends is forwarded and ignored there, as one for an unknown id
// is (docs/protocol.md, [ack.one]).
func (w *wire) inject(s *stream, msg *tetherv1.ConnectResponse) error {
	w.record(func() { s.carried(msg) })
	if err := s.send(msg); err != nil {
		return fmt.Errorf("sending the handler a %T of the kit's: %w", msg.GetMessage(), err)
	}
	return nil
}

// madeUpCreate is a CREATE delivery of the widget name (which need not
// exist) for the binding id, with the widget's annotations set to
// annotations.
func madeUpCreate(binding, name, scenario string, annotations map[string]string) *tetherv1.ConnectResponse {
	id := fmt.Sprintf("conformance-kit-%d", injected.Add(1))
	uid := "00000000-0000-4000-8000-" + fmt.Sprintf("%012d", injected.Load())
	obj, _ := json.Marshal(map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": namespace, "uid": uid, "annotations": annotations},
		"spec":     map[string]any{"scenario": scenario},
	})
	return &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Delivery{Delivery: &tetherv1.Delivery{
		Id: id, BindingId: binding, Kind: tetherv1.DeliveryKind_DELIVERY_KIND_CREATE, Attempt: 1,
		Ref: &tetherv1.ObjectRef{Resource: &tetherv1.Resource{Group: "test.tether.dev", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true},
			Namespace: namespace, Name: name, Uid: uid},
		Object:   obj,
		Deadline: timestamppb.New(time.Now().Add(waitFor)),
	}}}
}

// liveStream is the last stream the broker welcomed that has not ended;
// nil when there is none. The wire's lock must be held.
func (w *wire) liveStreamLocked() *stream {
	for i := len(w.streams) - 1; i >= 0; i-- {
		if s := w.streams[i]; s.welcome != nil && !s.ended {
			return s
		}
	}
	return nil
}

// awaitAckOf waits for the ack of the delivery id on s.
func (k *kit) awaitAckOf(ctx context.Context, s *stream, id string) (*tetherv1.Ack, error) {
	var a *tetherv1.Ack
	if !k.wire.await(ctx, waitFor, func() bool {
		a = s.acks[id].a
		return a != nil
	}) {
		return nil, fmt.Errorf("the handler did not ack the delivery %s within %v", id, waitFor)
	}
	return a, nil
}

// awaitErr is await with waitFor, failing with what it waited for.
func (w *wire) awaitErr(ctx context.Context, what string, cond func() bool) error {
	if !w.await(ctx, waitFor, cond) {
		return fmt.Errorf("no %s within %v", what, waitFor)
	}
	return nil
}
