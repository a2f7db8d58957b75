package dispatch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// attempt is what one try to send a delivery to an instance gets.
type attempt struct {
	ack *tetherv1.Ack
	err error
}

func ackOf(o tetherv1.Outcome) attempt { return attempt{ack: &tetherv1.Ack{Outcome: o, Message: "m"}} }

// TestDelivererCallTurnsAttemptsIntoOutcomes: what the instances answer
// (or fail to) becomes the binding's outcome, a wait, or the pass's end.
func TestDelivererCallTurnsAttemptsIntoOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		before   func(p *passTest, o *object, cancel context.CancelFunc)
		attempts []attempt // each send's answer, in turn
		sends    int
		attempt  uint32           // the attempt sent; zero: the first
		outcome  tetherv1.Outcome // of the ack replied; zero: none
		after    time.Duration
		cut      cut
		err      bool
		events   []string
	}{
		{name: "an OK ack is the outcome", attempts: []attempt{ackOf(tetherv1.Outcome_OUTCOME_OK)}, sends: 1, outcome: tetherv1.Outcome_OUTCOME_OK},
		{name: "a FAIL ack is the outcome, with an Event", attempts: []attempt{ackOf(tetherv1.Outcome_OUTCOME_FAIL)}, sends: 1,
			outcome: tetherv1.Outcome_OUTCOME_FAIL, events: []string{"HandlerFailed"}},
		{name: "an ack without an outcome counts as failed", attempts: []attempt{{ack: &tetherv1.Ack{}}}, sends: 1,
			outcome: tetherv1.Outcome_OUTCOME_FAIL, events: []string{"HandlerFailed"}},
		{name: "a RETRY waits its backoff", attempts: []attempt{ackOf(tetherv1.Outcome_OUTCOME_RETRY)}, sends: 1,
			after: time.Second, events: []string{"HandlerRetrying"}},
		{name: "a RETRY's retry_after stands for the backoff", sends: 1, after: 7 * time.Second, events: []string{"HandlerRetrying"},
			attempts: []attempt{{ack: &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_RETRY, RetryAfter: durationpb.New(7 * time.Second)}}}},
		{name: "a binding still in backoff is not sent", after: 2 * time.Second,
			before: func(p *passTest, o *object, _ context.CancelFunc) {
				o.work.tries.failed("c", 1, passStart.Add(2*time.Second), nil)
			}},
		{name: "retries run out: failed, and given up on", attempts: []attempt{ackOf(tetherv1.Outcome_OUTCOME_RETRY)}, sends: 1, attempt: 3,
			outcome: tetherv1.Outcome_OUTCOME_FAIL, events: []string{"RetriesExhausted"},
			before: func(p *passTest, o *object, _ context.CancelFunc) { o.work.tries.failed("c", 2, passStart, nil) }},
		{name: "an instance that left before it acked: sent again, not an attempt",
			attempts: []attempt{{err: session.ErrGone}, ackOf(tetherv1.Outcome_OUTCOME_OK)}, sends: 2, outcome: tetherv1.Outcome_OUTCOME_OK},
		{name: "withdrawn before it was sent: sent again",
			attempts: []attempt{{err: session.ErrMoved}, ackOf(tetherv1.Outcome_OUTCOME_OK)}, sends: 2, outcome: tetherv1.Outcome_OUTCOME_OK},
		{name: "fenced off: not an attempt, looked at again shortly", attempts: []attempt{{err: fmt.Errorf("%w: lapsed", session.ErrFenced)}}, sends: 1,
			after: fencedWait},
		{name: "a session its answer broke: a failed attempt", attempts: []attempt{{err: session.ErrBroke}}, sends: 1,
			after: time.Second, events: []string{"HandlerRetrying"}},
		{name: "no ack within the timeout: a failed attempt", attempts: []attempt{{err: context.DeadlineExceeded}}, sends: 1,
			after: time.Second, events: []string{"HandlerRetrying"}},
		{name: "the broker stopping ends it", attempts: []attempt{{err: context.Canceled}}, sends: 1, err: true,
			before: func(_ *passTest, _ *object, cancel context.CancelFunc) { cancel() }},
		{name: "no instance, and the handler past its grace: the pass is cut short", cut: cutAbsent,
			before: func(p *passTest, _ *object, _ context.CancelFunc) { p.absent(false) }},
		{name: "no instance, and the object changed: the pass is cut short", cut: cutChanged,
			before: func(p *passTest, o *object, _ context.CancelFunc) {
				p.h.pool.remove(instanceA)
				o.seen <- struct{}{}
			}},
		{name: "no instance, and the broker stopping: it ends", err: true,
			before: func(p *passTest, _ *object, cancel context.CancelFunc) {
				p.h.pool.remove(instanceA)
				cancel()
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := bind("c", binding.Create, binding.PolicyHold)
			p := newPassTest(t, c)
			p.h.opts.Metrics = metrics.New(prometheus.NewRegistry())
			o := p.see(sized("1", 1, "red"), watchAdded, false)
			p.begin(o)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.before != nil {
				tc.before(p, o, cancel)
			}
			var sent []*tetherv1.Delivery
			dl := &deliverer{handler: p.h, send: func(_ *session.Instance, _ context.Context, d *tetherv1.Delivery, _ <-chan struct{}, _ <-chan time.Time) (*tetherv1.Ack, error) {
				sent = append(sent, d)
				a := tc.attempts[min(len(sent), len(tc.attempts))-1]
				return a.ack, a.err
			}}
			rep := dl.call(ctx, o, c, &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_CREATE, Object: o.json()})
			if len(sent) != tc.sends {
				t.Errorf("%d sends, want %d", len(sent), tc.sends)
			}
			if rep.ack.GetOutcome() != tc.outcome || rep.after != tc.after || rep.cut != tc.cut || (rep.err != nil) != tc.err {
				t.Errorf("reply %v after %v, cut %v, err %v; want %v after %v, cut %v, err %v",
					rep.ack.GetOutcome(), rep.after, rep.cut, rep.err, tc.outcome, tc.after, tc.cut, tc.err)
			}
			if !slices.Equal(p.events.reasons, tc.events) {
				t.Errorf("Events %q, want %q", p.events.reasons, tc.events)
			}
			want := max(tc.attempt, 1)
			for _, d := range sent {
				if d.GetAttempt() != want || d.GetRef().GetUid() != "x" || d.GetBindingId() != "c" {
					t.Errorf("sent attempt %d of %s for %q; want attempt %d of x for c", d.GetAttempt(), d.GetRef().GetUid(), d.GetBindingId(), want)
				}
			}
			if tc.attempt > 0 && !o.work.gaveUp["c"] {
				t.Error("not marked given up on")
			}
		})
	}
}

// TestWaitForAnInstanceEndsWhenOneConnects: with no instance and the
// handler in its grace, a delivery waits for one, and goes to it.
func TestWaitForAnInstanceEndsWhenOneConnects(t *testing.T) {
	c := bind("c", binding.Create, binding.PolicyHold)
	p := newPassTest(t, c)
	p.h.pool.remove(instanceA)
	o := p.see(sized("1", 1, "red"), watchAdded, false)
	p.begin(o)
	to := make(chan *session.Instance, 1)
	dl := &deliverer{handler: p.h, send: func(in *session.Instance, _ context.Context, _ *tetherv1.Delivery, _ <-chan struct{}, _ <-chan time.Time) (*tetherv1.Ack, error) {
		to <- in
		return &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_OK}, nil
	}}
	joined := make(chan struct{})
	go func() {
		defer close(joined)
		p.h.pool.add(instanceA)
	}()
	rep := dl.call(context.Background(), o, c, &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_CREATE})
	<-joined
	if rep.ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK || <-to != instanceA {
		t.Errorf("reply %v; want OK from the instance that connected", rep.ack.GetOutcome())
	}
}
