package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestOversizedAnswerCountsAsAnAttempt: an answer over the broker's message
// limit ends the instance's session. Sent again to the same instance, the
// same delivery would end every next session the same way; instead it
// counts as a failed attempt, and once the binding's retries are used up
// the broker gives up with an Event that says why.
func TestOversizedAnswerCountsAsAnAttempt(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := tetherv1.NewBrokerServiceClient(conn)
	retries := int32(1)
	hello := &tetherv1.Hello{Handler: "big", InstanceId: "i", Bindings: []*tetherv1.Binding{{
		Id: "c", Kind: tetherv1.BindingKind_BINDING_KIND_CREATE, Namespaces: []string{ns}, Retries: &retries,
		Resource: &tetherv1.Resource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"},
	}}}
	create(t, dyn, widgetGVR, widget(ns, "w", nil))

	// Each session answers its first delivery with 5 MiB.
	var attempts []uint32
	for len(attempts) < 3 {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		stream := openSession(ctx, t, client, hello)
		var d *tetherv1.Delivery
		for d == nil {
			msg, err := stream.Recv()
			if err != nil {
				cancel()
				if len(attempts) == 2 {
					t.Fatalf("no third delivery: %v", err)
				}
				t.Fatalf("session %d: %v", len(attempts)+1, err)
			}
			d = msg.GetDelivery()
		}
		if len(attempts) == 2 {
			cancel()
			t.Fatalf("a third delivery (attempt %d) after the retries were used up", d.GetAttempt())
		}
		attempts = append(attempts, d.GetAttempt())
		huge := &tetherv1.Ack{DeliveryId: d.GetId(), Outcome: tetherv1.Outcome_OUTCOME_FAIL, Message: strings.Repeat("x", 5<<20)}
		_ = stream.Send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Ack{Ack: huge}})
		_, err = stream.Recv()
		for err == nil {
			_, err = stream.Recv()
		}
		cancel()
		if !strings.Contains(err.Error(), "larger than max") {
			t.Fatalf("session %d ended with %v, want the size limit", len(attempts), err)
		}
		if len(attempts) == 2 {
			break
		}
	}
	if attempts[0] != 1 || attempts[1] != 2 {
		t.Errorf("attempts %v, want [1 2]: the broken session counts", attempts)
	}
	eventually(t, "a RetriesExhausted Event naming the broken session", func() bool {
		for _, e := range events(t, cp, ns, "w") {
			if e.Reason == "RetriesExhausted" && strings.Contains(e.Message, "session ended before it answered") {
				return true
			}
		}
		return false
	})
	// Given up: a new session gets nothing for w.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stream := openSession(ctx, t, client, hello)
	for {
		msg, err := stream.Recv()
		if err != nil {
			break // the deadline: nothing was delivered
		}
		if d := msg.GetDelivery(); d != nil {
			t.Fatalf("delivered again after giving up: attempt %d", d.GetAttempt())
		}
	}
}
