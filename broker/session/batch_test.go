package session

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func deliveryMsg(id string, objectBytes int) *tetherv1.ConnectResponse {
	return &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Delivery{Delivery: &tetherv1.Delivery{
		Id: id, Object: []byte(strings.Repeat("x", objectBytes))}}}
}

func reviewMsg(id string) *tetherv1.ConnectResponse {
	return &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Delivery{Delivery: &tetherv1.Delivery{
		Id: id, Kind: tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION}}}
}

func cancelMsg(id string) *tetherv1.ConnectResponse {
	return &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Cancel{Cancel: &tetherv1.Cancel{DeliveryId: id}}}
}

// ids names what a message carries: "d1", "[d1 d2]" for a batch, "cancel d1".
func ids(m *tetherv1.ConnectResponse) string {
	switch {
	case m == nil:
		return ""
	case m.GetDelivery() != nil:
		return m.GetDelivery().GetId()
	case m.GetDeliveryBatch() != nil:
		var out []string
		for _, d := range m.GetDeliveryBatch().GetDeliveries() {
			out = append(out, d.GetId())
		}
		return "[" + strings.Join(out, " ") + "]"
	case m.GetCancel() != nil:
		return "cancel " + m.GetCancel().GetDeliveryId()
	}
	return fmt.Sprintf("%T", m.GetMessage())
}

// TestGatherBatchesOnlyTheDeliveriesReady: the deliveries waiting behind
// the first go with it in one batch, in order; nothing is waited for; a
// message that is no delivery, or a delivery past the batch's bytes, ends
// the batch and is sent next.
func TestGatherBatchesOnlyTheDeliveriesReady(t *testing.T) {
	big := tetherv1.MaxDeliveryBatchBytes / 2
	for _, tc := range []struct {
		name        string
		first       *tetherv1.ConnectResponse
		waiting     []*tetherv1.ConnectResponse
		msg, next   string
		leftWaiting int
	}{
		{name: "alone: sent as it is", first: deliveryMsg("d1", 10), msg: "d1"},
		{name: "the deliveries ready go together", first: deliveryMsg("d1", 10),
			waiting: []*tetherv1.ConnectResponse{deliveryMsg("d2", 10), deliveryMsg("d3", 10)}, msg: "[d1 d2 d3]"},
		{name: "a cancel ends the batch and goes next", first: deliveryMsg("d1", 10),
			waiting: []*tetherv1.ConnectResponse{deliveryMsg("d2", 10), cancelMsg("d0"), deliveryMsg("d3", 10)},
			msg:     "[d1 d2]", next: "cancel d0", leftWaiting: 1},
		{name: "a cancel first is not batched", first: cancelMsg("d0"),
			waiting: []*tetherv1.ConnectResponse{deliveryMsg("d1", 10)}, msg: "cancel d0", leftWaiting: 1},
		{name: "a delivery past the batch's bytes goes next", first: deliveryMsg("d1", big),
			waiting: []*tetherv1.ConnectResponse{deliveryMsg("d2", big-100), deliveryMsg("d3", 200), deliveryMsg("d4", 10)},
			msg:     "[d1 d2]", next: "d3", leftWaiting: 1},
		{name: "a delivery too large to share a message goes alone", first: deliveryMsg("d1", 10),
			waiting: []*tetherv1.ConnectResponse{deliveryMsg("d2", tetherv1.MaxDeliveryBatchBytes)}, msg: "d1", next: "d2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			more := make(chan *tetherv1.ConnectResponse, len(tc.waiting))
			for _, m := range tc.waiting {
				more <- m
			}
			msg, next := gather(tc.first, more, nil)
			if n := proto.Size(msg.GetDeliveryBatch()); n > tetherv1.MaxDeliveryBatchBytes {
				t.Errorf("a batch of %d bytes, over the %d allowed", n, tetherv1.MaxDeliveryBatchBytes)
			}
			if ids(msg) != tc.msg || ids(next) != tc.next || len(more) != tc.leftWaiting {
				t.Errorf("gather = %s, then %q, %d left waiting; want %s, then %q, %d left",
					ids(msg), ids(next), len(more), tc.msg, tc.next, tc.leftWaiting)
			}
		})
	}
}

// TestABatchHoldsAtMostMaxDeliveryBatch: past the bound, the rest wait
// for the next message.
func TestABatchHoldsAtMostMaxDeliveryBatch(t *testing.T) {
	more := make(chan *tetherv1.ConnectResponse, tetherv1.MaxDeliveryBatch+5)
	for i := range tetherv1.MaxDeliveryBatch + 5 {
		more <- deliveryMsg(fmt.Sprint("d", i+1), 1)
	}
	msg, next := gather(deliveryMsg("d0", 1), more, nil)
	if n := len(msg.GetDeliveryBatch().GetDeliveries()); n != tetherv1.MaxDeliveryBatch || next != nil || len(more) != 6 {
		t.Errorf("a batch of %d, next %s, %d left; want %d, none, 6", n, ids(next), len(more), tetherv1.MaxDeliveryBatch)
	}
}

// sentStream records what the sender writes.
type sentStream struct {
	tetherv1.BrokerService_ConnectServer
	sent []string
}

func (s *sentStream) Send(m *tetherv1.ConnectResponse) error {
	s.sent = append(s.sent, ids(m))
	return nil
}

// TestOnlyAnInstanceThatTakesBatchesGetsThem: the deliveries waiting go in
// one message to an instance whose Hello lists CAPABILITY_DELIVERY_BATCH,
// one message each to any other, in the order taken either way.
func TestOnlyAnInstanceThatTakesBatchesGetsThem(t *testing.T) {
	for _, tc := range []struct {
		name string
		caps Capabilities
		want string
	}{
		{name: "lists it", caps: Capabilities{tetherv1.Capability_CAPABILITY_CAPABILITIES, tetherv1.Capability_CAPABILITY_DELIVERY_BATCH},
			want: "[d1 d2 d3], cancel d0, d4"},
		{name: "lists others", caps: Capabilities{tetherv1.Capability_CAPABILITY_CAPABILITIES, tetherv1.Capability_CAPABILITY_ACK_BATCH},
			want: "d1, d2, d3, cancel d0, d4"},
		{name: "lists none (an SDK older than capabilities)", want: "d1, d2, d3, cancel d0, d4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newInstance("h", "i", "s", 0, 8, false)
			in.Capabilities = tc.caps
			in.send = make(chan *tetherv1.ConnectResponse, 8)
			// d0 was sent before: the instance holds it, so its Cancel goes.
			if _, err := in.win.acquire(context.Background(), "d0", false, nil, nil, nil); err != nil {
				t.Fatal(err)
			}
			for _, m := range []*tetherv1.ConnectResponse{deliveryMsg("d2", 1), deliveryMsg("d3", 1), cancelMsg("d0"), deliveryMsg("d4", 1)} {
				in.send <- m
			}
			var s sentStream
			// The serve loop takes one message and writes it; what waits
			// behind it is taken by the write or by the loop's next turns.
			first := deliveryMsg("d1", 1)
			for msg := first; msg != nil; {
				if err := in.write(&s, msg); err != nil {
					t.Fatal(err)
				}
				msg = nil
				select {
				case msg = <-in.send:
				default:
				}
			}
			if got := strings.Join(s.sent, ", "); got != tc.want {
				t.Errorf("sent %s, want %s", got, tc.want)
			}
		})
	}
}

// TestALingerTakesWhatComesBeforeItFires: with a linger, the sender waits
// for deliveries to come and sends them with the first once it fires; an
// admission review that comes ends the wait at once.
func TestALingerTakesWhatComesBeforeItFires(t *testing.T) {
	for _, tc := range []struct {
		name  string
		comes []*tetherv1.ConnectResponse
		fires bool // the linger fires after they came
		want  string
	}{
		{name: "what comes goes together once it fires",
			comes: []*tetherv1.ConnectResponse{deliveryMsg("d2", 1), deliveryMsg("d3", 1)}, fires: true, want: "[d1 d2 d3]"},
		{name: "nothing comes: the first goes alone", fires: true, want: "d1"},
		{name: "a review ends the wait",
			comes: []*tetherv1.ConnectResponse{deliveryMsg("d2", 1), reviewMsg("r3")}, want: "[d1 d2 r3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Unbuffered: each message comes only once gather waits for it.
			more, linger := make(chan *tetherv1.ConnectResponse), make(chan time.Time)
			go func() {
				for _, m := range tc.comes {
					more <- m
				}
				if tc.fires {
					linger <- time.Time{}
				}
			}()
			got := make(chan string, 1)
			go func() {
				msg, _ := gather(deliveryMsg("d1", 1), more, linger)
				got <- ids(msg)
			}()
			select {
			case g := <-got:
				if g != tc.want {
					t.Errorf("gather = %s, want %s", g, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("gather still waits 10s after the linger fired or a review came")
			}
		})
	}
}

// TestTheSenderLingersOnlyWhereMoreCouldCome: a lifecycle delivery alone
// in flight waits for company when the instance has a linger and a free
// slot; a review, a cancel, one with others in flight, or an instance
// whose window is full does not.
func TestTheSenderLingersOnlyWhereMoreCouldCome(t *testing.T) {
	for _, tc := range []struct {
		name   string
		linger time.Duration
		window int
		held   int
		msg    *tetherv1.ConnectResponse
		want   bool
	}{
		{name: "a delivery alone in flight, a slot free", linger: time.Millisecond, window: 4, held: 1, msg: deliveryMsg("d1", 1), want: true},
		// Others in flight: their acks bring more soon, and a wait would
		// hold up the workers whose deliveries it holds.
		{name: "others in flight", linger: time.Millisecond, window: 8, held: 3, msg: deliveryMsg("d1", 1)},
		{name: "no linger", window: 4, held: 1, msg: deliveryMsg("d1", 1)},
		{name: "the window is full", linger: time.Millisecond, window: 4, held: 4, msg: deliveryMsg("d1", 1)},
		{name: "a window of one", linger: time.Millisecond, window: 1, held: 1, msg: deliveryMsg("d1", 1)},
		{name: "a review", linger: time.Millisecond, window: 4, held: 1, msg: reviewMsg("r1")},
		{name: "a cancel", linger: time.Millisecond, window: 4, held: 1, msg: cancelMsg("d0")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newInstance("h", "i", "s", 0, tc.window, false)
			in.linger = tc.linger
			for i := range tc.held {
				if err := take(&in.win, fmt.Sprint("d", i), false); err != nil {
					t.Fatal(err)
				}
			}
			if got := in.lingers(tc.msg); got != tc.want {
				t.Errorf("lingers = %v, want %v", got, tc.want)
			}
		})
	}
}
