package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/resource"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

var deliverySeq atomic.Uint64

// acks counts the acks judged, for breakPanic.
var acks atomic.Uint64

// deliveryPrefix makes delivery ids unique across broker restarts, so a
// late ack from before a restart can never match a new delivery.
var deliveryPrefix = strconv.FormatInt(time.Now().UnixNano(), 36)

func nextDeliveryID() string {
	return deliveryPrefix + "-" + strconv.FormatUint(deliverySeq.Add(1), 10)
}

// delivery is how a pass delivers to the handler's instances and awaits
// their acks: the deliverer, or a fake in the unit tests of the pass.
type delivery interface {
	call(ctx context.Context, o *object, b *binding.Binding, d *tetherv1.Delivery) reply
}

// reply is how one delivery ended for its binding: ack, from instance in,
// when the binding is done with the change (OK, or FAIL, which includes
// retries running out); else its result says when to try again (a wait),
// or why the pass stops.
type reply struct {
	ack *tetherv1.Ack
	in  *session.Instance
	result
}

// deliverer sends one handler's deliveries to the instance that owns the
// object and turns the acks into outcomes: done, or try again after a delay.
type deliverer struct {
	*handler
	// send makes one attempt on an instance: the instance's own
	// DeliverUnless, or a fake in the deliverer's unit tests.
	send func(in *session.Instance, ctx context.Context, d *tetherv1.Delivery, abort <-chan struct{}, expired <-chan time.Time) (*tetherv1.Ack, error)
}

// call delivers d for binding b to the object's owner and interprets the
// ack. It replies with the ack when the binding is finished with this
// change, or a wait when it must be tried again later: it asked to be
// retried now, or earlier and its backoff has not run out (then nothing is
// sent). It waits while no instance is connected; an instance that leaves
// before it acks does not use up an attempt, the delivery goes to the next
// owner. d's Attempt, when set, counts attempts before this delivery's
// first (a daemon's failed runs): the handler is told them, retries do not
// count them.
func (dl *deliverer) call(ctx context.Context, o *object, b *binding.Binding, d *tetherv1.Delivery) reply {
	tries := o.work.triesOf(b)
	if left := tries.left(b.ID, dl.clock.Now()); left > 0 {
		return reply{result: lookAgainIn(left)}
	}
	attempt := tries.attempts(b.ID) + 1
	d.Attempt += uint32(attempt)
	var ack *tetherv1.Ack
	var in *session.Instance
	for ack == nil {
		var moved <-chan struct{}
		var res result
		if in, moved, res = dl.waitOwner(ctx, o); res.stops() {
			return reply{result: res}
		}
		d.Progress = nil
		if attempt > 1 && in.Capabilities.Has(tetherv1.Capability_CAPABILITY_PROGRESS) {
			d.Progress = tries.progress(b.ID)
		}
		var err error
		ack, err = dl.deliverTo(ctx, in, o, b, d, b.Retry.Timeout, moved)
		dl.postEvents(o, in, ack)
		if ack.GetOutcome() == tetherv1.Outcome_OUTCOME_RETRY && in.Leaving() {
			// Handed back by an instance that is stopping (it said Goodbye
			// before it answered): not an attempt, the next owner takes it.
			traceLog(ctx, dl.log).Debug("handed back by a leaving instance; re-sending", "instance", in.ID, "delivery", d.Id)
			ack = nil
			continue
		}
		switch {
		case errors.Is(err, session.ErrMoved):
			// Instances changed while it waited for a window slot: the
			// object may have another owner now.
		case errors.Is(err, session.ErrBroke):
			// The instance's answer ended its session: an attempt that
			// failed, so that backoff and retries bound what would
			// otherwise be sent to the same owner forever.
			ack = &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_RETRY, Message: fmt.Sprintf("the instance's session ended before it answered: %v", err)}
		case errors.Is(err, session.ErrGone), errors.Is(err, session.ErrLeaving):
			traceLog(ctx, dl.log).Debug("instance left before acking; re-sending", "instance", in.ID, "delivery", d.Id)
		case errors.Is(err, session.ErrFenced):
			// Not sent, and not an attempt: this replica may no longer
			// lead. Its elector either renews the Lease, and the change is
			// sent then, or ends this work.
			traceLog(ctx, dl.log).Debug("delivery fenced off; looking again later", "delivery", d.Id, "error", err)
			return reply{result: lookAgainIn(fencedWait)}
		case ctx.Err() != nil:
			return reply{result: failedWith(ctx.Err())}
		case err != nil:
			ack = &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_RETRY, Message: fmt.Sprintf("no ack within %v", b.Retry.Timeout)}
		}
	}
	ack, wait := dl.judge(o, b, ack, attempt, in)
	return reply{ack: ack, in: in, result: lookAgainIn(wait)}
}

// fencedWait is how soon a change whose delivery was fenced off is looked
// at again, should this replica still lead.
const fencedWait = 250 * time.Millisecond

// deliverTo makes one attempt to deliver d to in, waiting at most timeout
// for the ack. It gives up with session.ErrMoved, before sending, when
// moved closes (nil: never). d refers to the pass's state unless it names
// another (a raw event's).
func (dl *deliverer) deliverTo(ctx context.Context, in *session.Instance, o *object, b *binding.Binding, d *tetherv1.Delivery, timeout time.Duration, moved <-chan struct{}) (*tetherv1.Ack, error) {
	d.Id = nextDeliveryID()
	d.BindingId = b.ID
	if d.Ref == nil {
		d.Ref = ref(*o.res, o.cur)
	}
	// Wall clock, not the injected one: the deadline ends a real wait,
	// and the handler's own.
	d.Deadline = timestamppb.New(time.Now().Add(timeout))
	expiry := expiries.Get().(*time.Timer)
	expiry.Reset(timeout)
	defer func() {
		expiry.Stop()
		expiries.Put(expiry)
	}()
	ctx, span := dl.traceDelivery(ctx, in, d)
	start := time.Now()
	ack, err := dl.send(in, ctx, d, moved, expiry.C)
	traceAck(ctx, span, ack, err)
	if !errors.Is(err, session.ErrMoved) {
		dl.measure(ctx, b, d, time.Since(start), ack, err)
	}
	return ack, err
}

// expiries are the stopped timers that bound the wait for an ack, one per
// delivery under way: reused, since a stopped timer sends nothing stale,
// where a context with a deadline costs a timer, a channel and a context
// for every tick.
var expiries = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// judge turns an ack from in into the binding's outcome: the ack when the
// binding is done with it, or a delay before the next attempt, kept with
// the progress the ack reports. It posts the Events.
func (dl *deliverer) judge(o *object, b *binding.Binding, ack *tetherv1.Ack, attempt int, in *session.Instance) (*tetherv1.Ack, time.Duration) {
	if broken(breakPanic) && acks.Add(1) == 300 {
		panic("chaos self-test: the 300th ack")
	}
	tries := o.work.triesOf(b)
	if ack.GetOutcome() == tetherv1.Outcome_OUTCOME_OK {
		// The common case, every tick included: no formatting, and the
		// stay note is only looked at.
		tries.end(b.ID)
		noteAnswered(o, b.ID)
		return ack, 0
	}
	what := fmt.Sprintf("%s binding %q of handler %q", b.Kind, b.ID, dl.name)
	switch ack.GetOutcome() {
	case tetherv1.Outcome_OUTCOME_FAIL:
		tries.end(b.ID)
		noteAnswered(o, b.ID)
		dl.opts.Recorder.Event(o.decoded(), true, "HandlerFailed", fmt.Sprintf("%s failed: %s", what, ack.GetMessage()))
		return ack, 0
	case tetherv1.Outcome_OUTCOME_RETRY:
		if n := len(ack.GetProgress()); n > tetherv1.MaxProgressBytes {
			tries.end(b.ID)
			noteAnswered(o, b.ID)
			msg := fmt.Sprintf("%s asked to retry with a progress of %d bytes, more than the %d the broker keeps: %s", what, n, tetherv1.MaxProgressBytes, ack.GetMessage())
			dl.opts.Recorder.Event(o.decoded(), true, "HandlerFailed", msg)
			return &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_FAIL, Message: msg}, 0
		}
	default:
		tries.end(b.ID)
		noteAnswered(o, b.ID)
		msg := fmt.Sprintf("%s sent an ack without an outcome", what)
		dl.opts.Recorder.Event(o.decoded(), true, "HandlerFailed", msg)
		return &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_FAIL, Message: msg}, 0
	}
	if b.Retry.Exhausted(attempt) {
		tries.end(b.ID)
		if o.work.gaveUp == nil {
			o.work.gaveUp = map[string]bool{}
		}
		o.work.gaveUp[b.ID] = true
		msg := fmt.Sprintf("%s failed %d times, giving up: %s", what, attempt, ack.GetMessage())
		if b.Kind == binding.Delete && b.Policy == binding.PolicyStrict {
			noteRetry(o, b, attempt, ack.GetMessage()) // tried again (deliverDeletes)
		} else {
			noteAnswered(o, b.ID)
		}
		dl.opts.Recorder.Event(o.decoded(), true, "RetriesExhausted", msg)
		return &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_FAIL, Message: msg}, 0
	}
	wait := b.Retry.Delay(attempt)
	if ra := ack.GetRetryAfter(); ra != nil && ra.AsDuration() > 0 {
		wait = ra.AsDuration()
	}
	var progress []byte
	if in.Capabilities.Has(tetherv1.Capability_CAPABILITY_PROGRESS) {
		progress = ack.GetProgress()
	}
	tries.failed(b.ID, attempt, dl.clock.Now().Add(wait), progress)
	noteRetry(o, b, attempt, ack.GetMessage())
	dl.opts.Recorder.Event(o.decoded(), true, "HandlerRetrying",
		fmt.Sprintf("%s (attempt %d) asks to retry in %v: %s", what, attempt, wait, ack.GetMessage()))
	return nil, wait
}

// waitOwner blocks until some instance can take the object. It cuts the
// pass short once the handler is past its grace (cutAbsent), or when the
// informer saw the object change meanwhile (cutChanged: deleted, say):
// what it needs may be another thing now, and a worker waiting here must
// not keep it from that. changed closes when the instances change, after
// which the owner may be another.
func (dl *deliverer) waitOwner(ctx context.Context, o *object) (in *session.Instance, changed <-chan struct{}, res result) {
	for {
		in, changed := dl.pool.owner(o.uid)
		if in != nil {
			return in, changed, goOn
		}
		if dl.presence.now() >= contract.Absent {
			return nil, nil, result{cut: cutAbsent}
		}
		select {
		case <-changed:
		case <-o.seen:
			return nil, nil, result{cut: cutChanged}
		case <-ctx.Done():
			return nil, nil, failedWith(ctx.Err())
		}
	}
}

// measure records one delivery attempt and how long it took, for the
// handler and for binding b (whose series were bound once, newHandler). An
// attempt cut short because the broker is stopping (ctx ended) is not recorded.
func (dl *deliverer) measure(ctx context.Context, b *binding.Binding, d *tetherv1.Delivery, took time.Duration, ack *tetherv1.Ack, err error) {
	m := dl.opts.Metrics
	if m == nil {
		return
	}
	var outcome string
	switch {
	case err == nil:
		switch ack.GetOutcome() {
		case tetherv1.Outcome_OUTCOME_OK:
			outcome = metrics.OutcomeOK
		case tetherv1.Outcome_OUTCOME_RETRY:
			outcome = metrics.OutcomeRetry
		case tetherv1.Outcome_OUTCOME_FAIL:
			outcome = metrics.OutcomeFail
		default:
			outcome = metrics.OutcomeInvalid
		}
	case errors.Is(err, session.ErrGone), errors.Is(err, session.ErrLeaving):
		outcome = metrics.OutcomeGone
	case ctx.Err() != nil:
		return
	default:
		outcome = metrics.OutcomeTimeout
	}
	m.Delivered(dl.name, kindLabel(d.GetKind()), outcome, took)
	dl.bindingMetrics[b.ID].Delivered(outcome, took)
}

func ref(r resource.Resource, c *informer.Object) *tetherv1.ObjectRef {
	return &tetherv1.ObjectRef{
		Resource:        wireResource(r),
		Namespace:       c.Namespace,
		Name:            c.Name,
		Uid:             string(c.UID),
		ResourceVersion: c.ResourceVersion,
	}
}

// wireResources holds one wire form per resource, shared by the refs of
// every delivery: it is never changed, and marshalling a message that does
// not change is safe from many goroutines at once. Ticks at 10,000 a second
// no longer make one each.
var wireResources sync.Map // resource.Resource -> *tetherv1.Resource

func wireResource(r resource.Resource) *tetherv1.Resource {
	if w, ok := wireResources.Load(r); ok {
		return w.(*tetherv1.Resource)
	}
	w, _ := wireResources.LoadOrStore(r, &tetherv1.Resource{Group: r.Group, Version: r.Version, Resource: r.Resource, Kind: r.Kind, Namespaced: r.Namespaced})
	return w.(*tetherv1.Resource)
}

func mustJSON(v any) []byte {
	if v == nil {
		return nil
	}
	// Values here were decoded from JSON, so encoding them cannot fail.
	b, _ := json.Marshal(v)
	return b
}
