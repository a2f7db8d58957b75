package session

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func withAckBatch(h *tetherv1.Hello) {
	h.Capabilities = []tetherv1.Capability{tetherv1.Capability_CAPABILITY_CAPABILITIES, tetherv1.Capability_CAPABILITY_ACK_BATCH}
}

func (c *client) ackBatch(acks ...*tetherv1.Ack) {
	c.t.Helper()
	c.send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_AckBatch{AckBatch: &tetherv1.AckBatch{Acks: acks}}})
}

func okAck(id string) *tetherv1.Ack {
	return &tetherv1.Ack{DeliveryId: id, Outcome: tetherv1.Outcome_OUTCOME_OK, Message: "acked " + id}
}

// TestAnAckBatchAcksEachDelivery: a batch is taken as its acks one by one,
// in order: each Deliver gets its own, in any order of the batch; one for
// an unknown delivery and a second for the same delivery are ignored as
// alone; an empty batch acks nothing; the session goes on.
func TestAnAckBatchAcksEachDelivery(t *testing.T) {
	h := start(t, Options{})
	c, in := h.session(t, withWindow(4), withAckBatch)
	ids := []string{"d1", "d2", "d3"}
	var waits []<-chan result
	for _, id := range ids {
		waits = append(waits, deliver(context.Background(), in, id))
		if d := c.delivery(); d.GetId() != id {
			t.Fatalf("delivery %v, want %s", d, id)
		}
	}
	c.ackBatch()
	want := map[string]*tetherv1.Ack{"d1": okAck("d1"), "d2": okAck("d2"), "d3": okAck("d3")}
	c.ackBatch(want["d3"], okAck("never-sent"), want["d1"],
		&tetherv1.Ack{DeliveryId: "d3", Outcome: tetherv1.Outcome_OUTCOME_FAIL}, want["d2"])
	for i, w := range waits {
		if r := await(t, w); r.err != nil || !proto.Equal(r.ack, want[ids[i]]) {
			t.Errorf("Deliver %s = %v, %v; want %v", ids[i], r.ack, r.err, want[ids[i]])
		}
	}
	if in.InFlight() != 0 {
		t.Errorf("InFlight = %d after the batch", in.InFlight())
	}
	// The stream is still up, and a plain Ack still answers.
	r := deliver(context.Background(), in, "d4")
	c.delivery()
	c.ack("d4", tetherv1.Outcome_OUTCOME_OK)
	if got := await(t, r); got.err != nil {
		t.Errorf("Deliver after the batch: %v", got.err)
	}
}

// TestAnAckBatchIsRefused: a batch from an instance whose Hello did not list
// CAPABILITY_ACK_BATCH (none listed, or a list without it), or of more than
// MaxAckBatch acks, ends the stream with InvalidArgument, and the delivery
// it would have acked learns that the instance is gone rather than taking
// the ack. A batch of MaxAckBatch is taken.
func TestAnAckBatchIsRefused(t *testing.T) {
	tooMany := make([]*tetherv1.Ack, tetherv1.MaxAckBatch+1)
	for i := range tooMany {
		tooMany[i] = okAck("d1")
	}
	for _, tc := range []struct {
		name  string
		hello func(*tetherv1.Hello)
		acks  []*tetherv1.Ack
		want  string
	}{
		{name: "no capabilities listed", hello: func(*tetherv1.Hello) {}, acks: tooMany[:1], want: "CAPABILITY_ACK_BATCH"},
		{name: "a list without it", hello: func(h *tetherv1.Hello) {
			h.Capabilities = []tetherv1.Capability{tetherv1.Capability_CAPABILITY_CAPABILITIES}
		}, acks: tooMany[:1], want: "CAPABILITY_ACK_BATCH"},
		{name: "more than MaxAckBatch", hello: withAckBatch, acks: tooMany, want: "more than the 1024 allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, Options{})
			c, in := h.session(t, tc.hello)
			r := deliver(context.Background(), in, "d1")
			c.delivery()
			c.ackBatch(tc.acks...)
			st := c.end()
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.want) {
				t.Errorf("status %v, want InvalidArgument about %q", st, tc.want)
			}
			if res := await(t, r); !errors.Is(res.err, ErrGone) {
				t.Errorf("Deliver = %v, %v; want ErrGone", res.ack, res.err)
			}
		})
	}
	t.Run("MaxAckBatch is taken", func(t *testing.T) {
		h := start(t, Options{})
		c, in := h.session(t, withAckBatch)
		r := deliver(context.Background(), in, "d1")
		c.delivery()
		c.ackBatch(tooMany[:tetherv1.MaxAckBatch]...)
		if res := await(t, r); res.err != nil || !proto.Equal(res.ack, okAck("d1")) {
			t.Errorf("Deliver = %v, %v; want the batch's first ack", res.ack, res.err)
		}
	})
}
