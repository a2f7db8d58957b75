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
	"github.com/tether-dev/tether/broker/jsonpatch"
	"github.com/tether-dev/tether/broker/progress"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// process decides and does what one object needs now. It returns a delay
// when it must look again later (a retry, or a write waiting for its turn
// under the write limiter), or an error to be retried with the queue's rate
// limit (a refused write). A write waiting for its turn stays pending on the
// object and frees the worker: deliveries to other objects that write
// nothing go on meanwhile.
func (rt *runtime) process(ctx context.Context, uid types.UID) (time.Duration, error) {
	after, err := rt.processObject(ctx, uid)
	var paced *pacedWrite
	if errors.As(err, &paced) {
		return paced.wait, nil
	}
	return after, err
}

func (rt *runtime) processObject(ctx context.Context, uid types.UID) (time.Duration, error) {
	rt.mu.Lock()
	o := rt.objects[uid]
	rt.mu.Unlock()
	if o == nil {
		return 0, nil
	}
	// Only what the informer sees from now on may end a wait for an
	// instance (waitOwner): the notification that queued this pass is in.
	select {
	case <-o.seen:
	default:
	}
	pres := rt.presence()
	if pres >= contract.Absent {
		// Raw events are not kept for a handler past its grace: nothing
		// would take them, and they must not stand before a release.
		rt.dropRawEvents(o)
	} else if wait, err := rt.flushRawEvents(ctx, o); wait > 0 || err != nil {
		return wait, err
	}
	rt.mu.Lock()
	obj, gone, initial := o.obj, o.gone, o.initial
	rt.mu.Unlock()
	if initial {
		o.listed = true
	}
	if gone {
		return 0, rt.processGone(ctx, o, obj)
	}
	if o.pending != nil {
		err := rt.writes.apply(ctx, o, obj, o.pending)
		switch {
		case errors.Is(err, errRefused) && (obj.GetDeletionTimestamp() != nil || pres >= contract.Absent):
			// A write the API server keeps refusing must not keep the
			// object from its deletion work or from a release.
			o.pending = nil
		case err != nil:
			return 0, err
		}
		rt.mu.Lock()
		obj = o.obj
		rt.mu.Unlock()
	}
	if obj.GetDeletionTimestamp() != nil {
		return rt.processDeletion(ctx, o, obj)
	}
	if pres >= contract.Absent {
		return 0, rt.processAbsent(ctx, o, obj, pres)
	}
	if initial || o.settled != obj.GetResourceVersion() {
		if wait, err := rt.processLive(ctx, o, obj, initial, pres); wait > 0 || err != nil {
			return wait, err
		}
		rt.mu.Lock()
		obj = o.obj
		rt.mu.Unlock()
		if o.pending == nil {
			o.settled = obj.GetResourceVersion()
		}
	}
	if wait, err := rt.processTimers(ctx, o, obj); wait > 0 || err != nil {
		return wait, err
	}
	return 0, rt.processDaemons(ctx, o, obj)
}

// processGone forgets an object the watch says is deleted, after stopping
// its timers and daemons: a re-created object of the same name is another
// UID and starts afresh, while this one's daemons are still stopped.
func (rt *runtime) processGone(ctx context.Context, o *object, obj *unstructured.Unstructured) error {
	rt.stopTimers(o)
	rt.sched.CancelUID(o.uid)
	if err := rt.stopDaemons(ctx, o, obj, "the object was deleted"); err != nil {
		return err
	}
	rt.mu.Lock()
	if len(o.events) == 0 {
		delete(rt.objects, o.uid)
	}
	rt.mu.Unlock()
	return nil
}

func (rt *runtime) invalidPatch(obj *unstructured.Unstructured, b *binding.Binding, err error) {
	rt.m.opts.Recorder.Event(obj, true, "InvalidPatch",
		fmt.Sprintf("%s binding %q of handler %q: %v; nothing of its answer was written", b.Kind, b.ID, rt.name, err))
}

// flushRawEvents delivers queued watch events to event bindings, in order.
func (rt *runtime) flushRawEvents(ctx context.Context, o *object) (time.Duration, error) {
	for {
		rt.mu.Lock()
		if len(o.events) == 0 {
			rt.mu.Unlock()
			return 0, nil
		}
		ev := o.events[0]
		rt.mu.Unlock()
		if o.eventDone == nil {
			o.eventDone = map[string]bool{}
		}
		for _, b := range rt.byResource[o.res.GroupVersionResource] {
			if b.Kind != binding.Event || o.eventDone[b.ID] || !rt.matches(b, ev.obj, nil) {
				continue
			}
			d := &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_EVENT, Object: mustJSON(ev.obj.Object), EventType: ev.typ}
			_, _, wait, err := rt.call(ctx, o, b, ev.obj, d)
			if wait > 0 || err != nil {
				return wait, err
			}
			o.eventDone[b.ID] = true
		}
		rt.mu.Lock()
		o.events = o.events[1:]
		rt.mu.Unlock()
		o.eventDone = nil
	}
}

// dropRawEvents forgets the raw events queued for o.
func (rt *runtime) dropRawEvents(o *object) {
	rt.mu.Lock()
	n := len(o.events)
	o.events = nil
	rt.mu.Unlock()
	o.eventDone = nil
	if n > 0 {
		rt.log.Debug("raw events dropped: the handler is past its grace", "uid", o.uid, "events", n)
	}
}

// matches evaluates b's filters; a CEL error counts as no match and is
// logged, since it comes from the object, not from the broker.
func (rt *runtime) matches(b *binding.Binding, obj *unstructured.Unstructured, old map[string]any) bool {
	ok, err := b.Matches(obj, old)
	if err != nil {
		rt.log.Warn("when expression failed; binding skipped", "binding", b.ID,
			"namespace", obj.GetNamespace(), "name", obj.GetName(), "error", err)
	}
	return ok && err == nil
}

// processLive handles an object that is not being deleted: it works out
// the cause (create, update, resume), delivers it to every matching binding,
// and then writes the outcome with the hold in one patch.
func (rt *runtime) processLive(ctx context.Context, o *object, obj *unstructured.Unstructured, initial bool, pres contract.Presence) (time.Duration, error) {
	bindings := rt.byResource[o.res.GroupVersionResource]
	dec := contract.Decide(contract.Object{Held: hold.Has(obj, rt.name), Policy: rt.policy(bindings, obj)}, pres)
	old, handled, err := rt.lastHandled(o, obj)
	if err != nil {
		rt.log.Warn("unreadable last-handled state; handling as new", "name", obj.GetName(), "error", err)
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

	for _, b := range bindings {
		kind, ok := deliveryKind(b, cause, diff)
		if !ok || o.done[b.ID] || !rt.matches(b, obj, old) {
			continue
		}
		d := &tetherv1.Delivery{Kind: kind, Object: mustJSON(obj.Object)}
		if cause == "update" && old != nil {
			d.OldObject = mustJSON(old)
			d.Diff = progress.DiffProto(diff)
		}
		if b.Kind == binding.Field {
			fo, _ := progress.Field(old, b.FieldPath)
			fn, _ := progress.Field(obj.Object, b.FieldPath)
			d.FieldOld, d.FieldNew = mustJSON(fo), mustJSON(fn)
		}
		ack, in, wait, err := rt.call(ctx, o, b, obj, d)
		if err != nil {
			return 0, err
		}
		if wait > 0 {
			// The hold goes with the outcome in one write, but not after a
			// retry: the object may be deleted while the handler fails, and
			// its delete bindings must still run then.
			if dec.Action == contract.Add && !hold.Has(obj, rt.name) {
				if err := rt.writes.apply(ctx, o, obj, &write{addHold: true}); err != nil {
					return 0, err
				}
			}
			return wait, nil
		}
		if ack.GetOutcome() == tetherv1.Outcome_OUTCOME_OK {
			if err := o.acc.add(b.ID, ack, in.User); err != nil {
				rt.invalidPatch(obj, b, err)
			}
		}
		o.done[b.ID] = true
	}

	w := o.acc.write(rt.name)
	if cause != "" && rt.tracksState(bindings, obj) {
		after := progress.Essence(jsonpatch.ApplyMerge(obj.Object, o.acc.merge))
		enc, err := progress.Encode(after)
		if err != nil {
			return 0, err
		}
		w.setAnnotation(progress.LastHandledKey(rt.name), enc)
		w.lastHandled = progress.Recorded(after)
	}
	switch held := hold.Has(obj, rt.name); {
	case dec.Action == contract.Add && !held:
		w.addHold = true
	case dec.Action == contract.Release && held:
		r := rt.releaseWrite(dec.Rule)
		w.removeHold, w.release, w.landed = true, r.release, r.landed
	}
	rt.mu.Lock()
	o.initial = false
	rt.mu.Unlock()
	if w.empty() {
		return 0, nil
	}
	if err := rt.writes.apply(ctx, o, obj, w); err != nil {
		return 0, err
	}
	o.resetCause("")
	return 0, nil
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
func (rt *runtime) lastHandled(o *object, obj *unstructured.Unstructured) (map[string]any, bool, error) {
	if o.lastHandled != nil {
		return o.lastHandled, true, nil
	}
	return progress.LastHandled(obj, rt.name)
}

// tracksState reports whether the handler keeps a last-handled state for
// obj: it has a create, update, field or resume binding whose filters (but
// CEL, which may depend on the change) match.
func (rt *runtime) tracksState(bindings []*binding.Binding, obj *unstructured.Unstructured) bool {
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

// processDeletion runs the deletion work of an object being deleted (stop
// its timers and daemons, deliver its delete bindings) and releases the
// handler's hold when the contract says so: the work is done, a daemon
// timed out, or the handler is past its grace.
func (rt *runtime) processDeletion(ctx context.Context, o *object, obj *unstructured.Unstructured) (time.Duration, error) {
	rt.stopTimers(o)
	if err := rt.stopDaemons(ctx, o, obj, "the object is being deleted"); err != nil {
		return 0, err
	}
	o.resetCause("delete")
	policy := rt.policy(rt.byResource[o.res.GroupVersionResource], obj)
	for {
		state := contract.Object{Deleting: true, Held: hold.Has(obj, rt.name), Policy: policy, Work: rt.deletionWork(o, obj)}
		dec := contract.Decide(state, rt.presence())
		if !dec.Deliver {
			if dec.Action != contract.Release {
				return 0, nil
			}
			return 0, rt.writes.apply(ctx, o, obj, rt.releaseWrite(dec.Rule))
		}
		wait, err := rt.deliverDeletes(ctx, o, obj, state.Work)
		switch {
		case errors.Is(err, errAbsent):
			// The grace ran out while it waited for an instance: decide again.
		case wait > 0 || err != nil:
			return wait, err
		}
	}
}

// deliverDeletes delivers the next delete binding not done with obj. When
// all are done, some only because the broker gave up on them, and the
// contract still wants the work (STRICT), those are tried again after the
// longest backoff.
func (rt *runtime) deliverDeletes(ctx context.Context, o *object, obj *unstructured.Unstructured, work contract.Work) (time.Duration, error) {
	var again time.Duration
	for _, b := range rt.byResource[o.res.GroupVersionResource] {
		if b.Kind != binding.Delete || !rt.matches(b, obj, nil) {
			continue
		}
		if work == contract.GaveUp && o.gaveUp[b.ID] {
			delete(o.done, b.ID)
			delete(o.gaveUp, b.ID)
			again = max(again, b.Retry.MaxBackoff)
			continue
		}
		if o.done[b.ID] {
			continue
		}
		d := &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_DELETE, Object: mustJSON(obj.Object)}
		if _, _, wait, err := rt.call(ctx, o, b, obj, d); wait > 0 || err != nil {
			return wait, err
		}
		o.done[b.ID] = true
		return 0, nil
	}
	if again > 0 {
		rt.m.opts.Recorder.Event(obj, true, "HandlerRetrying", fmt.Sprintf(
			"the delete bindings of handler %q ran out of retries, but a STRICT hold waits for the handler's answer: trying again in %v", rt.name, again))
	}
	return again, nil
}

func digest(v map[string]any) string {
	sum := sha256.Sum256(mustJSON(v))
	return hex.EncodeToString(sum[:8])
}
