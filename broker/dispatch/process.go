package dispatch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/progress"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// reconciler decides and does what one object of a handler needs, one
// object at a time: the queue never hands a UID to two workers.
type reconciler struct {
	*handler
	deliver *deliverer
	timers  *timers
	daemons *daemons
}

// reconcile decides and does what one object needs now. It returns a delay
// when it must look again later (a retry, or a write waiting for its turn
// under the write limiter), or an error to be retried with the queue's rate
// limit (a refused write). A write waiting for its turn stays pending on the
// object and frees the worker: deliveries to other objects that write
// nothing go on meanwhile.
//
// The raw events go first, then the rest of the object's work. A binding
// in backoff is passed over until it is due, and the pass goes on with the
// others: the delay returned is the soonest one due.
func (r *reconciler) reconcile(ctx context.Context, uid types.UID) (time.Duration, error) {
	r.mu.Lock()
	o := r.objects[uid]
	r.mu.Unlock()
	if o == nil {
		return 0, nil
	}
	// Only what the informer sees from now on may end a wait for an
	// instance (waitOwner): the notification that queued this pass is in.
	r.mu.Lock()
	o.seen = make(chan struct{}, 1)
	o.begin()
	exited := o.exited || o.outside
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		o.endPass()
		r.mu.Unlock()
	}()
	if exited {
		if err := r.confirmExit(ctx, o); err != nil {
			return 0, err
		}
	}
	r.load(o)
	pres := r.presence.now()
	var events time.Duration
	if pres >= contract.Absent {
		// Raw events are not kept for a handler past its grace: nothing
		// would take them, and they must not stand before a release.
		r.dropRawEvents(o)
	} else {
		var err error
		if events, err = r.flushRawEvents(ctx, o); err != nil {
			return 0, err
		}
	}
	wait, err := r.lifecycle(ctx, o, pres)
	if err != nil {
		return 0, err
	}
	return sooner(wait, events), nil
}

// lifecycle does the object's work but its raw events: a pending write,
// the deletion work, the create, update or resume, ticks and daemons.
func (r *reconciler) lifecycle(ctx context.Context, o *object, pres contract.Presence) (time.Duration, error) {
	r.mu.Lock()
	gone, initial := o.gone, o.initial
	r.mu.Unlock()
	r.load(o)
	if initial {
		o.listed = true
	}
	if gone {
		return 0, r.gone(ctx, o)
	}
	if o.work.pending != nil {
		// When a release of a deleted object removes its last finalizer,
		// the API server deletes the object and answers with it as it
		// was, the hold still on: the pass ends with the release, as it
		// does when the release is made at once, or it would decide on
		// that answer and release the hold again.
		released := o.work.pending.removeHold && o.cur.Deleting
		wait, err := r.writes.apply(ctx, o, o.work.pending)
		switch {
		case errors.Is(err, errRefused) && (o.cur.Deleting || pres >= contract.Absent):
			// A write the API server keeps refusing must not keep the
			// object from its deletion work or from a release.
			o.work.pending = nil
		case err != nil || wait > 0:
			return wait, err
		case released:
			return 0, nil
		}
		r.load(o)
	}
	if o.cur.Deleting {
		if broken(breakTickDeleting) {
			if wait, err := r.timers.process(ctx, o); wait > 0 || err != nil {
				return wait, err
			}
		}
		return r.deletion(ctx, o, o.decoded())
	}
	if pres >= contract.Absent {
		return r.absent(ctx, o, o.decoded(), pres)
	}
	if initial || o.settled != o.cur.ResourceVersion {
		if wait, err := r.live(ctx, o, o.decoded(), initial, pres); wait > 0 || err != nil {
			return wait, err
		}
		r.load(o)
		if o.work.pending == nil {
			o.settled = o.cur.ResourceVersion
		}
	}
	// An unchanged object's ticks and daemons mostly need only cur's
	// fields: they decode it when a filter or an answer needs more.
	if wait, err := r.timers.process(ctx, o); wait > 0 || err != nil {
		return wait, err
	}
	return 0, r.daemons.process(ctx, o)
}

// load makes the latest state the informer or a write gave the object the
// one the pass works on.
func (r *reconciler) load(o *object) {
	r.mu.Lock()
	c := o.obj
	r.mu.Unlock()
	if c != o.cur {
		o.cur, o.view = c, nil
	}
}

// gone forgets an object the watch says is deleted, after stopping
// its timers and daemons: a re-created object of the same name is another
// UID and starts afresh, while this one's daemons are still stopped.
func (r *reconciler) gone(ctx context.Context, o *object) error {
	r.timers.stopAll(o)
	r.sched.CancelUID(o.uid)
	if err := r.daemons.stopAll(ctx, o, "the object was deleted"); err != nil {
		return err
	}
	r.mu.Lock()
	if len(o.events) == 0 {
		delete(r.objects, o.uid)
	}
	r.mu.Unlock()
	return nil
}

// live handles an object that is not being deleted: it works out
// the cause (create, update, resume), delivers it to every matching binding,
// and then writes the outcome with the hold in one patch.
func (r *reconciler) live(ctx context.Context, o *object, obj *unstructured.Unstructured, initial bool, pres contract.Presence) (time.Duration, error) {
	bindings := r.bindingsOf(o)
	dec := contract.Decide(contract.Object{Held: hold.Has(obj, r.name), Policy: r.policy(bindings, obj)}, pres)
	old, handled, err := r.lastHandled(o, obj)
	if err != nil {
		r.log.Warn("unreadable last-handled state; handling as new", "name", obj.GetName(), "error", err)
	}
	essence := progress.Essence(obj.Object)
	var cause string
	switch {
	case !handled:
		cause = "create"
	case !progress.Equal(old, essence):
		cause = "update"
	case initial:
		cause = "resume"
	}
	if progress.Digested(old) {
		old = nil // too large to have been recorded: the update has no old side
	}
	var diff []progress.Entry
	if cause == "update" && old != nil {
		diff = progress.Diff(old, essence)
	}
	o.resetCause(cause + "/" + digest(essence))

	var wait time.Duration // the soonest a binding in backoff is due
	for _, b := range bindings {
		kind, ok := deliveryKind(b, cause, diff)
		if !ok || o.work.done[b.ID] || !r.matches(b, obj, old) {
			continue
		}
		if kind == tetherv1.DeliveryKind_DELIVERY_KIND_CREATE && broken(breakSkipCreates) {
			o.markDone(b.ID)
			continue
		}
		d := causeDelivery(o, b, kind, cause, obj, old, diff)
		ack, in, w, err := r.deliver.call(ctx, o, b, d)
		if err != nil {
			return 0, err
		}
		if w > 0 {
			wait = sooner(wait, w) // in backoff: the others go on
			continue
		}
		if ack.GetOutcome() == tetherv1.Outcome_OUTCOME_OK {
			if err := o.work.acc.add(b.ID, ack, in.User); err != nil {
				r.invalidPatch(obj, b, err)
			}
		}
		o.markDone(b.ID)
	}
	if wait > 0 {
		// The hold goes with the outcome in one write, but not after a
		// retry: the object may be deleted while the handler fails, and
		// its delete bindings must still run then.
		if dec.Action == contract.Add && !hold.Has(obj, r.name) {
			if paced, err := r.writes.apply(ctx, o, &write{addHold: true}); paced > 0 || err != nil {
				return paced, err
			}
		}
		return wait, nil
	}

	w := o.work.acc.write(r.name)
	if cause != "" && r.tracksState(bindings, obj) {
		if err := w.recordHandled(r.name, obj.Object); err != nil {
			return 0, err
		}
	}
	switch held := hold.Has(obj, r.name); {
	case dec.Action == contract.Add && !held:
		w.addHold = true
	case dec.Action == contract.Release && held:
		r := r.releaseWrite(dec.Rule)
		w.removeHold, w.release, w.landed = true, r.release, r.landed
	}
	r.mu.Lock()
	o.initial = false
	r.mu.Unlock()
	if w.empty() {
		return 0, nil
	}
	if wait, err := r.writes.apply(ctx, o, w); wait > 0 || err != nil {
		return wait, err
	}
	o.resetCause("")
	return 0, nil
}

// causeDelivery is the delivery of cause to binding b, as kind: an update
// carries the last-handled essence old and the diff, a field binding its
// field's two sides.
func causeDelivery(o *object, b *binding.Binding, kind tetherv1.DeliveryKind, cause string, obj *unstructured.Unstructured, old map[string]any, diff []progress.Entry) *tetherv1.Delivery {
	d := &tetherv1.Delivery{Kind: kind, Object: o.json()}
	if cause == "update" && old != nil {
		d.OldObject = mustJSON(old)
		d.Diff = progress.DiffProto(diff)
	}
	if b.Kind == binding.Field {
		fo, _ := progress.Field(old, b.FieldPath)
		fn, _ := progress.Field(obj.Object, b.FieldPath)
		d.FieldOld, d.FieldNew = mustJSON(fo), mustJSON(fn)
	}
	return d
}

// deliveryKind says whether binding b takes part in cause, and as what.
func deliveryKind(b *binding.Binding, cause string, diff []progress.Entry) (tetherv1.DeliveryKind, bool) {
	switch {
	case b.Kind == binding.Create && cause == "create":
		return tetherv1.DeliveryKind_DELIVERY_KIND_CREATE, true
	case b.Kind == binding.Update && cause == "update":
		return tetherv1.DeliveryKind_DELIVERY_KIND_UPDATE, true
	case b.Kind == binding.Resume && cause == "resume":
		return tetherv1.DeliveryKind_DELIVERY_KIND_RESUME, true
	case b.Kind == binding.Field && cause == "update" && progress.Touches(diff, b.FieldPath):
		return tetherv1.DeliveryKind_DELIVERY_KIND_FIELD, true
	}
	return 0, false
}

// lastHandled is the essence the handler last finished with: this broker's
// memory when it has one (the informer may still show an older object),
// else the annotation.
func (r *reconciler) lastHandled(o *object, obj *unstructured.Unstructured) (map[string]any, bool, error) {
	if o.work.lastHandled != nil {
		return o.work.lastHandled, true, nil
	}
	return progress.LastHandled(obj, r.name)
}

// tracksState reports whether the handler keeps a last-handled state for
// obj: it has a create, update, field or resume binding whose filters (but
// CEL, which may depend on the change) match.
func (r *reconciler) tracksState(bindings []*binding.Binding, obj *unstructured.Unstructured) bool {
	for _, b := range bindings {
		switch b.Kind {
		case binding.Create, binding.Update, binding.Field, binding.Resume:
			withoutCEL := *b
			withoutCEL.When = nil
			if ok, _ := withoutCEL.Matches(obj, nil); ok {
				return true
			}
		}
	}
	return false
}

// deletion runs the deletion work of an object being deleted (stop
// its timers and daemons, deliver its delete bindings) and releases the
// handler's hold when the contract says so: the work is done, a daemon
// timed out, or the handler is past its grace.
func (r *reconciler) deletion(ctx context.Context, o *object, obj *unstructured.Unstructured) (time.Duration, error) {
	if !broken(breakTickDeleting) {
		r.timers.stopAll(o)
	}
	if err := r.daemons.stopAll(ctx, o, "the object is being deleted"); err != nil {
		return 0, err
	}
	o.resetCause("delete")
	policy := r.policy(r.bindingsOf(o), obj)
	for {
		state := contract.Object{Deleting: true, Held: hold.Has(obj, r.name), Policy: policy, Work: r.deletionWork(o, obj)}
		dec := contract.Decide(state, r.presence.now())
		if !dec.Deliver {
			if dec.Action != contract.Release || broken(breakKeepHolds) {
				return 0, nil
			}
			return r.writes.apply(ctx, o, r.releaseWrite(dec.Rule))
		}
		wait, err := r.deliverDeletes(ctx, o, obj, state.Work)
		switch {
		case errors.Is(err, errAbsent):
			// The grace ran out while it waited for an instance: decide again.
		case wait > 0 || err != nil:
			return wait, err
		}
	}
}

// deliverDeletes delivers the next delete binding not done with obj that is
// not in backoff, or returns how soon the first in backoff is due. When
// all are done, some only because the broker gave up on them, and the
// contract still wants the work (STRICT), those are tried again after the
// longest backoff.
func (r *reconciler) deliverDeletes(ctx context.Context, o *object, obj *unstructured.Unstructured, work contract.Work) (time.Duration, error) {
	var again, wait time.Duration
	for _, b := range r.bindingsOf(o) {
		if b.Kind != binding.Delete || !r.matches(b, obj, nil) {
			continue
		}
		if work == contract.GaveUp && o.work.gaveUp[b.ID] {
			delete(o.work.done, b.ID)
			delete(o.work.gaveUp, b.ID)
			again = max(again, b.Retry.MaxBackoff)
			continue
		}
		if o.work.done[b.ID] {
			continue
		}
		if strict := b.Policy == binding.PolicyStrict; broken(breakSkipDeletes) && !strict || broken(breakSkipStrict) && strict {
			o.markDone(b.ID)
			return 0, nil
		}
		d := &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_DELETE, Object: o.json()}
		_, _, w, err := r.deliver.call(ctx, o, b, d)
		if err != nil {
			return 0, err
		}
		if w > 0 {
			wait = sooner(wait, w) // in backoff: the others go on
			continue
		}
		o.markDone(b.ID)
		return 0, nil
	}
	if wait > 0 {
		return wait, nil
	}
	if again > 0 {
		r.opts.Recorder.Event(obj, true, "HandlerRetrying", fmt.Sprintf(
			"the delete bindings of handler %q ran out of retries, but a STRICT hold waits for the handler's answer: trying again in %v", r.name, again))
	}
	return again, nil
}

func digest(v map[string]any) string {
	sum := sha256.Sum256(mustJSON(v))
	return hex.EncodeToString(sum[:8])
}
