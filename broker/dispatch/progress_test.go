package dispatch

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// progressTest delivers binding c of one object to an instance that lists
// CAPABILITY_PROGRESS (or not, with lists false), answering each send with
// the next of acks, and records what each send carried in progress.
type progressTest struct {
	p    *passTest
	o    *object
	c    *binding.Binding
	dl   *deliverer
	acks []*tetherv1.Ack
	sent [][]byte
}

func newProgressTest(t *testing.T, lists bool) *progressTest {
	c := bind("c", binding.Create, binding.PolicyHold)
	p := newPassTest(t, c)
	in := &session.Instance{Handler: "h", ID: "p"}
	if lists {
		in.Capabilities = session.Capabilities{tetherv1.Capability_CAPABILITY_CAPABILITIES, tetherv1.Capability_CAPABILITY_PROGRESS}
	}
	p.h.pool.remove(instanceA)
	p.h.pool.add(in)
	o := p.see(sized("1", 1, "red"), watchAdded, false)
	p.begin(o)
	pt := &progressTest{p: p, o: o, c: c}
	pt.dl = &deliverer{handler: p.h, send: func(_ *session.Instance, _ context.Context, d *tetherv1.Delivery, _ <-chan struct{}, _ <-chan time.Time) (*tetherv1.Ack, error) {
		pt.sent = append(pt.sent, d.GetProgress())
		a := pt.acks[0]
		pt.acks = pt.acks[1:]
		return a, nil
	}}
	return pt
}

// attempt makes the next attempt, once the backoff of the last has run
// out, answered with ack.
func (pt *progressTest) attempt(ack *tetherv1.Ack) reply {
	pt.acks = append(pt.acks, ack)
	pt.p.clk.Step(time.Hour)
	return pt.dl.call(context.Background(), pt.o, pt.c, &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_CREATE})
}

func retryWith(progress string) *tetherv1.Ack {
	return &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_RETRY, Message: "m", Progress: []byte(progress)}
}

// TestARetrysProgressComesBackWithTheNextAttemptOfTheCause: the progress
// of a RETRY goes with the next attempt of the same cause, the last one's
// replacing the one before; OK and FAIL forget it, and so does a new
// cause; the first attempt has none.
func TestARetrysProgressComesBackWithTheNextAttemptOfTheCause(t *testing.T) {
	for _, tc := range []struct {
		name    string
		between func(pt *progressTest) // after the first retry, instead of end
		end     *tetherv1.Ack
		want    string // the progress sent with the attempt after end
	}{
		{name: "OK forgets it", end: &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_OK}},
		{name: "FAIL forgets it", end: &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_FAIL, Message: "no"}},
		{name: "a RETRY without progress forgets it", end: retryWith("")},
		{name: "another RETRY replaces it", end: retryWith("two"), want: "two"},
		{name: "a new cause forgets it", between: func(pt *progressTest) { pt.o.resetCause("update/0123") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pt := newProgressTest(t, true)
			pt.attempt(retryWith("one"))
			want := [][]byte{nil}
			if tc.between != nil {
				tc.between(pt)
			} else {
				pt.attempt(tc.end)
				want = append(want, []byte("one"))
			}
			pt.attempt(&tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_OK})
			if want = append(want, []byte(tc.want)); !slices.EqualFunc(pt.sent, want, bytes.Equal) {
				t.Errorf("progress sent %q, want %q", pt.sent, want)
			}
			if got := pt.o.work.tries.progress("c"); got != nil {
				t.Errorf("progress %q kept after OK", got)
			}
		})
	}
}

// TestProgressNeedsTheCapability: an instance that does not list
// CAPABILITY_PROGRESS is sent none, and what its acks carry is not kept.
func TestProgressNeedsTheCapability(t *testing.T) {
	pt := newProgressTest(t, false)
	pt.attempt(retryWith("one"))
	pt.attempt(&tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_OK})
	if len(pt.sent) != 2 || pt.sent[1] != nil {
		t.Errorf("progress sent %q, want none", pt.sent)
	}
}

// TestProgressPastTheLimitFailsTheBinding: a RETRY whose progress is more
// than MaxProgressBytes becomes a FAIL that says so, with a HandlerFailed
// Event, and nothing is kept: neither the attempts nor the note that the
// binding is retrying, which the stuck scan reads.
func TestProgressPastTheLimitFailsTheBinding(t *testing.T) {
	pt := newProgressTest(t, true)
	pt.attempt(retryWith("one"))
	pt.p.events.reasons = nil
	rep := pt.attempt(retryWith(strings.Repeat("x", tetherv1.MaxProgressBytes+1)))
	if rep.ack.GetOutcome() != tetherv1.Outcome_OUTCOME_FAIL || !strings.Contains(rep.ack.GetMessage(), "progress") {
		t.Errorf("reply %v %q, want a FAIL about the progress", rep.ack.GetOutcome(), rep.ack.GetMessage())
	}
	if !slices.Equal(pt.p.events.reasons, []string{"HandlerFailed"}) {
		t.Errorf("Events %q, want HandlerFailed", pt.p.events.reasons)
	}
	if pt.o.work.tries.progress("c") != nil || pt.o.work.tries.attempts("c") != 0 {
		t.Error("the binding's attempts are kept after the FAIL")
	}
	if n := pt.o.stay.Load(); n != nil && len(n.retrying) > 0 {
		t.Errorf("the binding is still noted as retrying after the FAIL: %+v (the stuck scan would say so)", n.retrying)
	}
	pt.attempt(retryWith(strings.Repeat("x", tetherv1.MaxProgressBytes)))
	if got := len(pt.o.work.tries.progress("c")); got != tetherv1.MaxProgressBytes {
		t.Errorf("a progress of the limit kept as %d bytes, want %d", got, tetherv1.MaxProgressBytes)
	}
}
