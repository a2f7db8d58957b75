package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

var deliverySeq atomic.Uint64

// deliveryPrefix makes delivery ids unique across broker restarts, so a
// late ack from before a restart can never match a new delivery.
var deliveryPrefix = strconv.FormatInt(time.Now().UnixNano(), 36)

func nextDeliveryID() string {
	return deliveryPrefix + "-" + strconv.FormatUint(deliverySeq.Add(1), 10)
}

// call delivers d for binding b to the object's owner and interprets the
// ack. It returns the ack when the binding is finished with this change
// (OK, or FAIL, which includes retries running out), or wait > 0 when it
// must be tried again later. It waits while no instance is connected; an
// instance that leaves before it acks does not use up an attempt, the
// delivery goes to the next owner. in is the instance that answered.
func (rt *runtime) call(ctx context.Context, o *object, b *binding.Binding, obj *unstructured.Unstructured, d *tetherv1.Delivery) (ack *tetherv1.Ack, in *session.Instance, wait time.Duration, err error) {
	attempt := o.attempts[b.ID] + 1
	d.Attempt = uint32(attempt)
	for ack == nil {
		var moved <-chan struct{}
		if in, moved, err = rt.waitOwner(ctx, o); err != nil {
			return nil, nil, 0, err
		}
		ack, err = rt.deliverTo(ctx, in, o, b, obj, d, b.Retry.Timeout, moved)
		if ack.GetOutcome() == tetherv1.Outcome_OUTCOME_RETRY && in.Leaving() {
			// Handed back by an instance that is stopping (it said Goodbye
			// before it answered): not an attempt, the next owner takes it.
			rt.log.Debug("handed back by a leaving instance; re-sending", "instance", in.ID, "delivery", d.Id)
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
			rt.log.Debug("instance left before acking; re-sending", "instance", in.ID, "delivery", d.Id)
		case ctx.Err() != nil:
			return nil, nil, 0, ctx.Err()
		case err != nil:
			ack = &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_RETRY, Message: fmt.Sprintf("no ack within %v", b.Retry.Timeout)}
		}
	}
	ack, wait = rt.judge(o, b, obj, ack, attempt)
	return ack, in, wait, nil
}

// deliverTo makes one attempt to deliver d to in, waiting at most timeout
// for the ack. It gives up with session.ErrMoved, before sending, when
// moved closes (nil: never).
func (rt *runtime) deliverTo(ctx context.Context, in *session.Instance, o *object, b *binding.Binding, obj *unstructured.Unstructured, d *tetherv1.Delivery, timeout time.Duration, moved <-chan struct{}) (*tetherv1.Ack, error) {
	d.Id = nextDeliveryID()
	d.BindingId = b.ID
	d.Ref = ref(o, obj)
	d.Deadline = timestamppb.New(time.Now().Add(timeout))
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	ack, err := in.DeliverUnless(dctx, d, moved)
	if !errors.Is(err, session.ErrMoved) {
		rt.observeDelivery(ctx, d, time.Since(start), ack, err)
	}
	return ack, err
}

// judge turns an ack into the binding's outcome: the ack when the binding
// is done with it, or a delay before the next attempt. It posts the Events.
func (rt *runtime) judge(o *object, b *binding.Binding, obj *unstructured.Unstructured, ack *tetherv1.Ack, attempt int) (*tetherv1.Ack, time.Duration) {
	if ack.GetOutcome() == tetherv1.Outcome_OUTCOME_OK {
		// The common case, every tick included: no formatting.
		delete(o.attempts, b.ID)
		return ack, 0
	}
	what := fmt.Sprintf("%s binding %q of handler %q", b.Kind, b.ID, rt.name)
	switch ack.GetOutcome() {
	case tetherv1.Outcome_OUTCOME_FAIL:
		delete(o.attempts, b.ID)
		rt.m.opts.Recorder.Event(obj, true, "HandlerFailed", fmt.Sprintf("%s failed: %s", what, ack.GetMessage()))
		return ack, 0
	case tetherv1.Outcome_OUTCOME_RETRY:
	default:
		msg := fmt.Sprintf("%s sent an ack without an outcome", what)
		rt.m.opts.Recorder.Event(obj, true, "HandlerFailed", msg)
		return &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_FAIL, Message: msg}, 0
	}
	o.attempts[b.ID] = attempt
	if b.Retry.Exhausted(attempt) {
		delete(o.attempts, b.ID)
		if o.gaveUp == nil {
			o.gaveUp = map[string]bool{}
		}
		o.gaveUp[b.ID] = true
		msg := fmt.Sprintf("%s failed %d times, giving up: %s", what, attempt, ack.GetMessage())
		rt.m.opts.Recorder.Event(obj, true, "RetriesExhausted", msg)
		return &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_FAIL, Message: msg}, 0
	}
	wait := b.Retry.Delay(attempt)
	if ra := ack.GetRetryAfter(); ra != nil && ra.AsDuration() > 0 {
		wait = ra.AsDuration()
	}
	rt.m.opts.Recorder.Event(obj, true, "HandlerRetrying",
		fmt.Sprintf("%s (attempt %d) asks to retry in %v: %s", what, attempt, wait, ack.GetMessage()))
	return nil, wait
}

func ref(o *object, obj *unstructured.Unstructured) *tetherv1.ObjectRef {
	r := o.res
	return &tetherv1.ObjectRef{
		Resource:        &tetherv1.Resource{Group: r.Group, Version: r.Version, Resource: r.Resource, Kind: r.Kind, Namespaced: r.Namespaced},
		Namespace:       obj.GetNamespace(),
		Name:            obj.GetName(),
		Uid:             string(obj.GetUID()),
		ResourceVersion: obj.GetResourceVersion(),
	}
}

func mustJSON(v any) []byte {
	if v == nil {
		return nil
	}
	// Values here were decoded from JSON, so encoding them cannot fail.
	b, _ := json.Marshal(v)
	return b
}
