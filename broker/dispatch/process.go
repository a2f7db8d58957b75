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
// object at a time: the queue never hands a UID to two workers. It
// delivers through deliver and writes through writer, which the unit tests
// of the pass replace with fakes.
type reconciler struct {
	*handler
	deliver delivery
	writer  writer
	events  *rawEvents
	timers  *timers
	daemons *daemons
}

// writer makes the writes of a pass: the handler's objectWriter, or a fake
// in the unit tests of the pass.
type writer interface {
	// apply makes w against the state the pass works on; it returns how
	// long w still waits for its turn, or why it did not land.
	apply(ctx context.Context, o *object, w *write) (time.Duration, error)
	// releaseTurn is how long a release of a long-absent handler's hold
	// still waits for its turn.
	releaseTurn(o *object) time.Duration
}

// write makes w and says what the pass does next.
func (r *reconciler) write(ctx context.Context, o *object, w *write) result {
	ctx, span := r.traceWrite(ctx, w)
	wait, err := r.writer.apply(ctx, o, w)
	traceWritten(span, wait, err)
	switch {
	case errors.Is(err, errRefused):
		noteRefused(o, err.Error())
	case err == nil && wait == 0:
		noteRefused(o, "")
	}
	return result{after: wait, err: err}
}

// reconcile decides and does what one object needs now. Its result looks
// again later (a retry, or a write waiting for its turn under the write
// limiter), or retries with the queue's rate limit (a refused write). A
// write waiting for its turn stays pending on the object and frees the
// worker: deliveries to other objects that write nothing go on meanwhile.
//
// The raw events go first, then the rest of the object's work. A binding
// in backoff is passed over until it is due, and the pass goes on with the
// others: the wait returned is the soonest one due.
func (r *reconciler) reconcile(ctx context.Context, uid types.UID) result {
	r.mu.Lock()
	o := r.objects[uid]
	seen := r.takeSeen(uid)
	var s sight
	if o != nil {
		// Only what the informer sees from now on may end a wait for an
		// instance (waitOwner): the notification that queued this pass is in.
		o.seen = make(chan struct{}, 1)
		o.begin()
		s = o.sight()
	}
	r.mu.Unlock()
	if o == nil {
		return goOn
	}
	ctx = r.tracePass(ctx, o, seen)
	defer func() {
		endPassTrace(ctx)
		r.mu.Lock()
		o.endPass()
		r.mu.Unlock()
	}()
	if s.confirm {
		if err := r.confirmExit(ctx, o); err != nil {
			return failedWith(err)
		}
		s = r.sight(o)
	}
	o.load(s.obj)
	pres := r.presence.now()
	events := goOn
	switch {
	case pres >= contract.Absent:
		// Raw events are not kept for a handler past its grace: nothing
		// would take them, and they must not stand before a release.
		r.events.drop(o, s.events)
	case s.events:
		if events = r.events.flush(ctx, o); events.aborts() {
			return events
		}
		// The informer may have seen more while they were delivered.
		s = r.sight(o)
		o.load(s.obj)
	}
	return r.lifecycle(ctx, o, s, pres).sooner(events.after)
}

// sight takes what the informer saw of o since the pass began.
func (h *handler) sight(o *object) sight {
	h.mu.Lock()
	defer h.mu.Unlock()
	return o.sight()
}

// lifecycle does the object's work but its raw events: a pending write,
// the deletion work, the create, update or resume, ticks and daemons. s is
// what the informer saw, taken at the pass's start.
func (r *reconciler) lifecycle(ctx context.Context, o *object, s sight, pres contract.Presence) result {
	if s.initial {
		o.listed = true
	}
	if s.gone {
		return failedWith(r.gone(ctx, o))
	}
	if o.work.pending != nil && !r.decideAgain(o, o.work.pending, pres) {
		o.work.pending = nil
	}
	if o.work.pending != nil {
		// When a release of a deleted object removes its last finalizer,
		// the API server deletes the object and answers with it as it
		// was, the hold still on: the pass ends with the release, as it
		// does when the release is made at once, or it would decide on
		// that answer and release the hold again.
		released := o.work.pending.removeHold && o.cur.Deleting
		res := r.write(ctx, o, o.work.pending)
		switch {
		case errors.Is(res.err, errRefused) && (o.cur.Deleting || pres >= contract.Absent):
			// A write the API server keeps refusing must not keep the
			// object from its deletion work or from a release.
			o.work.pending = nil
		case res.stops():
			return res
		case released:
			return goOn
		}
		r.load(o)
	}
	if o.cur.Deleting {
		if broken(breakTickDeleting) {
			if res := r.timers.process(ctx, o); res.stops() {
				return res
			}
		}
		return r.deletion(ctx, o, o.decoded())
	}
	if pres >= contract.Absent {
		return r.absent(ctx, o, o.decoded(), pres)
	}
	if s.initial || o.settled != o.cur.ResourceVersion {
		decided := o.cur.ResourceVersion
		o.work.wrote = written{}
		if res := r.live(ctx, o, o.decoded(), s.initial, pres); res.stops() {
			return res
		}
		if rv := o.work.wrote.settles(); rv != "" {
			decided = rv
		}
		r.load(o)
		// What live decided on is settled, or the answer to its write; a
		// newer state the informer brought meanwhile (a user's change
		// while the update was delivered) gets a pass of its own.
		if o.work.pending == nil {
			o.settled = decided
		}
	}
	// An unchanged object's ticks and daemons mostly need only cur's
	// fields: they decode it when a filter or an answer needs more.
	if res := r.timers.process(ctx, o); res.stops() {
		return res
	}
	return r.daemons.process(ctx, o)
}

// load makes the latest state the informer or a write gave the object the
// one the pass works on.
func (r *reconciler) load(o *object) {
	r.mu.Lock()
	c := o.obj
	r.mu.Unlock()
	o.load(c)
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
func (r *reconciler) live(ctx context.Context, o *object, obj *unstructured.Unstructured, initial bool, pres contract.Presence) result {
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
		rep := r.deliver.call(ctx, o, b, causeDelivery(o, b, kind, cause, obj, old, diff))
		if rep.aborts() {
			return rep.result
		}
		if rep.after > 0 {
			wait = sooner(wait, rep.after) // in backoff: the others go on
			continue
		}
		if rep.ack.GetOutcome() == tetherv1.Outcome_OUTCOME_OK {
			if err := o.work.acc.add(b, rep.ack, rep.in.User); err != nil {
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
			if res := r.write(ctx, o, &write{addHold: true}); res.stops() {
				return res
			}
		}
		return lookAgainIn(wait)
	}
	return r.outcome(ctx, o, obj, bindings, cause, dec, initial)
}

// outcome writes what the acks of a handled change asked for, with the
// last-handled state and the hold as the contract decided, in one write.
func (r *reconciler) outcome(ctx context.Context, o *object, obj *unstructured.Unstructured, bindings []*binding.Binding, cause string, dec contract.Decision, initial bool) result {
	w := o.work.acc.write(r.name)
	if cause != "" && tracksState(bindings, obj) {
		if err := w.recordHandled(r.name, obj.Object); err != nil {
			return failedWith(fmt.Errorf("recording %s/%s as handled: %w", obj.GetNamespace(), obj.GetName(), err))
		}
	}
	switch held := hold.Has(obj, r.name); {
	case dec.Action == contract.Add && !held:
		w.addHold = true
	case dec.Action == contract.Release && held:
		r := r.releaseWrite(dec.Rule)
		w.removeHold, w.release, w.landed = true, r.release, r.landed
	}
	if initial {
		// Only the initial list this pass saw is handled: one the informer
		// or the handler's return marked since stays for the next pass.
		r.mu.Lock()
		o.initial = false
		r.mu.Unlock()
	}
	if w.empty() {
		return goOn
	}
	if res := r.write(ctx, o, w); res.stops() {
		return res
	}
	o.resetCause("")
	return goOn
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
func (h *handler) lastHandled(o *object, obj *unstructured.Unstructured) (map[string]any, bool, error) {
	if o.work.lastHandled != nil {
		return o.work.lastHandled, true, nil
	}
	return progress.LastHandled(obj, h.name)
}

// tracksState reports whether the handler keeps a last-handled state for
// obj: it has a create, update, field or resume binding whose filters (but
// CEL, which may depend on the change) match.
func tracksState(bindings []*binding.Binding, obj *unstructured.Unstructured) bool {
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
func (r *reconciler) deletion(ctx context.Context, o *object, obj *unstructured.Unstructured) result {
	if !broken(breakTickDeleting) {
		r.timers.stopAll(o)
	}
	if err := r.daemons.stopAll(ctx, o, "the object is being deleted"); err != nil {
		return failedWith(err)
	}
	o.resetCause("delete")
	policy := r.policy(r.bindingsOf(o), obj)
	for {
		state := contract.Object{Deleting: true, Held: hold.Has(obj, r.name), Policy: policy, Work: r.deletionWork(o, obj)}
		dec := contract.Decide(state, r.presence.now())
		if !dec.Deliver {
			if dec.Action != contract.Release || broken(breakKeepHolds) {
				return goOn
			}
			return r.write(ctx, o, r.releaseWrite(dec.Rule))
		}
		switch res := r.deliverDeletes(ctx, o, obj, state.Work); {
		case res.cut == cutAbsent:
			// The grace ran out while it waited for an instance: decide again.
		case res.stops():
			return res
		}
	}
}

// deliverDeletes delivers the next delete binding not done with obj that is
// not in backoff, or returns how soon the first in backoff is due. When
// all are done, some only because the broker gave up on them, and the
// contract still wants the work (STRICT), those are tried again after the
// longest backoff.
func (r *reconciler) deliverDeletes(ctx context.Context, o *object, obj *unstructured.Unstructured, work contract.Work) result {
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
			return goOn
		}
		rep := r.deliver.call(ctx, o, b, &tetherv1.Delivery{Kind: tetherv1.DeliveryKind_DELIVERY_KIND_DELETE, Object: o.json()})
		if rep.aborts() {
			return rep.result
		}
		if rep.after > 0 {
			wait = sooner(wait, rep.after) // in backoff: the others go on
			continue
		}
		o.markDone(b.ID)
		return goOn
	}
	if wait > 0 {
		return lookAgainIn(wait)
	}
	if again > 0 {
		r.opts.Recorder.Event(obj, true, "HandlerRetrying", fmt.Sprintf(
			"the delete bindings of handler %q ran out of retries, but a STRICT hold waits for the handler's answer: trying again in %v", r.name, again))
	}
	return lookAgainIn(again)
}

func digest(v map[string]any) string {
	sum := sha256.Sum256(mustJSON(v))
	return hex.EncodeToString(sum[:8])
}
