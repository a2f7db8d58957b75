package session

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// TestAFencedDeliveryIsNotSentButAReviewIs: while the fence says no, a
// lifecycle delivery returns ErrFenced, wrapping the fence's reason, without
// reaching the instance or keeping its window slot; a review needs no
// leadership and goes through.
func TestAFencedDeliveryIsNotSentButAReviewIs(t *testing.T) {
	lapsed := errors.New("tenure lapsed")
	var fenced atomic.Bool
	h := start(t, Options{Supported: AllKinds, Fence: func() error {
		if fenced.Load() {
			return lapsed
		}
		return nil
	}})
	validate := func(hl *tetherv1.Hello) {
		hl.Bindings = append(hl.Bindings, &tetherv1.Binding{Id: "check", Kind: tetherv1.BindingKind_BINDING_KIND_VALIDATE,
			Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"}})
	}
	c, in := h.session(t, withWindow(1), validate)

	fenced.Store(true)
	if r := await(t, deliver(context.Background(), in, "fenced")); !errors.Is(r.err, ErrFenced) || !errors.Is(r.err, lapsed) {
		t.Fatalf("Deliver = %v, %v; want ErrFenced wrapping the fence's error", r.ack, r.err)
	}
	if n := in.InFlight(); n != 0 {
		t.Errorf("%d deliveries in flight after a fenced one, want 0", n)
	}
	review := make(chan result, 1)
	go func() {
		ack, err := in.Deliver(context.Background(), &tetherv1.Delivery{Id: "review", BindingId: "check", Kind: tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION})
		review <- result{"review", ack, err}
	}()
	// The first message the instance gets is the review: nothing of the
	// fenced delivery reached it.
	if d := c.delivery(); d.GetId() != "review" {
		t.Fatalf("delivery %s, want the review", d.GetId())
	}
	c.ack("review", tetherv1.Outcome_OUTCOME_OK)
	if r := await(t, review); r.err != nil {
		t.Fatalf("review: %v", r.err)
	}

	fenced.Store(false)
	after := deliver(context.Background(), in, "after")
	if d := c.delivery(); d.GetId() != "after" {
		t.Fatalf("delivery %s, want after, once the fence lets it through", d.GetId())
	}
	c.ack("after", tetherv1.Outcome_OUTCOME_OK)
	await(t, after)
}

// TestADeliveryTheSenderHeldIsFencedAgainBeforeItIsSent: a delivery that
// passed the fence when it was handed to the sender, then waited there for
// company (the linger) while the fence came to say no, is not sent: its
// Deliver returns ErrFenced and frees its slot, and the review that ended
// the wait goes alone. A leader frozen during that wait wakes with the
// linger fired; without the second look it would send the delivery then.
func TestADeliveryTheSenderHeldIsFencedAgainBeforeItIsSent(t *testing.T) {
	lapsed := errors.New("tenure lapsed")
	var fenced atomic.Bool
	in := newInstance("h", "i", "s", 0, 8, false)
	in.Capabilities = Capabilities{tetherv1.Capability_CAPABILITY_CAPABILITIES, tetherv1.Capability_CAPABILITY_DELIVERY_BATCH}
	in.linger = time.Hour // ended by the review, never by the timer
	in.fence = func() error {
		if fenced.Load() {
			return lapsed
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	held := deliver(ctx, in, "held")
	first := <-in.send // the serve loop's take: past any check Deliver makes
	review := make(chan result, 1)
	go func() {
		fenced.Store(true)
		ack, err := in.Deliver(ctx, &tetherv1.Delivery{Id: "review", Kind: tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION})
		review <- result{"review", ack, err}
	}()
	var s sentStream
	if err := in.write(&s, first); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.sent, ", "); got != "review" {
		t.Fatalf("sent %s once the fence said no, want the review alone", got)
	}
	if r := await(t, held); !errors.Is(r.err, ErrFenced) || !errors.Is(r.err, lapsed) {
		t.Errorf("Deliver(held) = %v, %v; want ErrFenced wrapping the fence's error", r.ack, r.err)
	}
	in.win.ack(&tetherv1.Ack{DeliveryId: "review"})
	if r := await(t, review); r.err != nil {
		t.Errorf("review: %v", r.err)
	}
	if n := in.InFlight(); n != 0 {
		t.Errorf("%d deliveries in flight once both ended, want 0", n)
	}
}

// TestTheSenderWritesOnlyWhatItMay: with the fence saying no, a message
// keeps only its reviews, and each lifecycle delivery in it is answered
// ErrFenced (an abandoned one's slot freed, as its ack would); a Cancel
// goes only for a delivery the instance holds.
func TestTheSenderWritesOnlyWhatItMay(t *testing.T) {
	lapsed := errors.New("tenure lapsed")
	for _, tc := range []struct {
		name     string
		fenced   bool
		held     []string // handed to the sender, waiting for an answer
		abandon  string   // one of held that Deliver stopped waiting for
		msg      *tetherv1.ConnectResponse
		want     string
		answered []string // answered ErrFenced
	}{
		{name: "the fence lets all through", held: []string{"d1"},
			msg: batchMsg(deliveryMsg("d1", 1), reviewMsg("r2")), want: "[d1 r2]"},
		{name: "a batch keeps its reviews", fenced: true, held: []string{"d1", "d3"},
			msg:  batchMsg(deliveryMsg("d1", 1), reviewMsg("r2"), deliveryMsg("d3", 1)),
			want: "r2", answered: []string{"d1", "d3"}},
		{name: "a lone delivery goes unsent", fenced: true, held: []string{"d1"},
			msg: deliveryMsg("d1", 1), answered: []string{"d1"}},
		{name: "an abandoned one frees its slot", fenced: true, held: []string{"d1"}, abandon: "d1",
			msg: deliveryMsg("d1", 1)},
		{name: "a review goes", fenced: true, msg: reviewMsg("r1"), want: "r1"},
		{name: "a Cancel of a held delivery goes", fenced: true, held: []string{"d0"},
			msg: cancelMsg("d0"), want: "cancel d0"},
		{name: "a Cancel of a delivery never sent is dropped", msg: cancelMsg("d0")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newInstance("h", "i", "s", 0, 8, false)
			in.fence = func() error {
				if tc.fenced {
					return lapsed
				}
				return nil
			}
			answers := map[string]chan answer{}
			for _, id := range tc.held {
				c, err := in.win.acquire(context.Background(), id, false, nil, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				answers[id] = c
			}
			if tc.abandon != "" {
				in.win.abandon(tc.abandon)
			}
			if got := ids(in.sendable(tc.msg)); got != tc.want {
				t.Errorf("sent %q, want %q", got, tc.want)
			}
			for _, id := range tc.answered {
				select {
				case a := <-answers[id]:
					if !errors.Is(a.err, ErrFenced) || !errors.Is(a.err, lapsed) {
						t.Errorf("%s answered %v, want ErrFenced wrapping the fence's error", id, a.err)
					}
					in.win.release(id) // as Deliver does
				default:
					t.Errorf("%s not answered", id)
				}
			}
			if tc.abandon != "" && in.InFlight() != len(tc.held)-1 {
				t.Errorf("%d in flight, want the abandoned delivery's slot freed", in.InFlight())
			}
		})
	}
}

func batchMsg(ms ...*tetherv1.ConnectResponse) *tetherv1.ConnectResponse {
	var ds []*tetherv1.Delivery
	for _, m := range ms {
		ds = append(ds, m.GetDelivery())
	}
	return deliveryMessage(ds)
}
