package dispatch

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/resource"
)

const (
	watchAdded    = "ADDED"
	watchModified = "MODIFIED"
	watchDeleted  = "DELETED"
	// watchExited is a DELETED from a filtered informer: the object was
	// deleted, or only stopped matching the selector. The watch sends both
	// with the object's previous content, so only a read tells them apart.
	watchExited = "EXITED"
)

// rawEvent is one watch event kept for event bindings. seq numbers the
// object's queued events, oldest first; it starts again from 0 once the
// queue is empty.
type rawEvent struct {
	typ string
	obj *informer.Object
	seq uint64
}

// object is what one handler's controller knows about one object (one UID),
// in two parts: what the informer's handlers, the scheduler and the
// instances write (observed), under handler.mu, and the rest, which only
// the worker that holds the UID touches, without a lock: the queue never
// gives a UID to two workers at once. A pass takes the observed part it
// works on in one go, as a sight, at its start.
//
// An object with a timer or a daemon is kept between passes, so at 100,000
// objects its size is the controller's share of the heap that every garbage
// collection marks: what only lifecycle work and writes use is in work,
// which a pass drops when it leaves nothing there.
type object struct {
	uid types.UID
	res *resource.Resource // the subscription's, shared by its objects
	observed

	// The worker's own, from here on.

	// cur is the state the current pass works on, and view its decoded
	// form, made the first time a part of the pass needs more than cur's
	// fields (a tick of an unchanged object mostly does not), and never
	// changed. Both are dropped when the pass ends: between passes only
	// the cache keeps the object, as JSON.
	cur  *informer.Object
	view *unstructured.Unstructured
	// work is the worker's state of the change being handled and of the
	// object's writes. A pass starts with one (begin) and drops it when it
	// ends empty (endPass): between passes most objects have none.
	work *objectWork
	// timers are the timer bindings scheduled for this object.
	timers idSet
	// settled is the resourceVersion whose lifecycle handling is complete;
	// a tick on an unchanged object need not work out the cause again.
	settled string
	// listed: the object was seen in an initial list (a broker start, the
	// handler's return) and its timers have not been looked at since;
	// their first ticks are spread over one interval.
	listed bool
	// daemonTimedOut: a daemon did not acknowledge stop while the object
	// was being deleted, so its hold is released by that timeout.
	daemonTimedOut bool
	// stay is what the worker publishes of the object's troubles for the
	// stuck-hold scan (stay.go); nil when there are none.
	stay atomic.Pointer[stayNote]
}

// observed is the part of an object written under handler.mu by the
// informer's handlers, the scheduler and the instances' reports. Fields
// that hold pointers come first and the flags last, packed.
type observed struct {
	obj *informer.Object // latest state seen, in its cached form

	// seen gets a token (buffered, never blocks) on every informer
	// notification during a pass, to end the worker's wait for an
	// instance. It exists only while a pass runs: between passes the
	// object keeps no channel.
	seen chan struct{}
	// exitEvent is the raw DELETED of an object a filtered informer said
	// deleted (exited), for event bindings, delivered only if the object is
	// really gone.
	exitEvent *rawEvent
	events    []rawEvent // pending raw events, oldest first
	// exits are daemon exits reported by instances, oldest first.
	exits []daemonExit
	// daemons are the daemons started for this object, by binding id. The
	// worker changes them under handler.mu, since removeInstance reads them.
	daemons map[string]*daemon
	// due holds the ticks and restarts the scheduler fired, with when they
	// were due.
	due dueSet
	// changed is when the object last changed, for idle timers.
	changed time.Time

	gone bool // the watch said deleted
	// exited: a filtered informer said deleted, which the next pass
	// confirms (confirmExit).
	exited bool
	// outside: the object is there but outside the informers' selector,
	// which will show it no more; each pass reads it (confirmExit) until it
	// is at rest and forgotten.
	outside bool
	initial bool // seen in an initial list: resume applies
}

// sight is what a pass takes of an object's observed part, in one go
// under handler.mu: the state to work on and what the informer said of it.
type sight struct {
	obj     *informer.Object
	gone    bool // the watch said deleted
	confirm bool // it left a filtered informer, or is outside it: confirmExit reads it
	initial bool // seen in an initial list
	events  bool // raw events are queued
}

// sight is o's observed part as a pass sees it. o's lock (handler.mu) must
// be held.
func (o *object) sight() sight {
	return sight{obj: o.obj, gone: o.gone, confirm: o.exited || o.outside, initial: o.initial, events: len(o.events) > 0}
}

// load makes c the state the pass works on.
func (o *object) load(c *informer.Object) {
	if c != o.cur {
		o.cur, o.view = c, nil
	}
}

// objectWork is what one object's worker keeps of the change it handles and
// of the object's writes.
type objectWork struct {
	// lastHandled is the essence this broker recorded in this pass, which
	// may be newer than what the informer shows in the annotation. Between
	// passes the annotation of the latest state, which includes what the
	// broker's writes returned (remember), has it.
	lastHandled map[string]any
	// wrote is the API server's answer to this pass's last write: the
	// state the pass's decision is recorded in, which the pass settles
	// rather than a newer one the informer brought meanwhile, when it
	// holds the write's changes alone (written.settles).
	wrote written
	// cause identifies the change being handled; done, gaveUp and tries
	// belong to it and are reset when it changes. gaveUp marks the bindings
	// that are done because the broker gave up on them (retries ran out),
	// not because the handler answered.
	cause  string
	done   map[string]bool
	gaveUp map[string]bool
	tries  tries
	acc    accumulated
	// pending is a write that was refused (conflict) or waits for its turn
	// under the write limiter; it is made on the latest state before
	// anything else happens to the object.
	pending *write
	// writeAt is the turn the write limiter gave the object's next write
	// (zero: none reserved); releaseAt the release limiter's turn for
	// stripping its hold while the handler is long absent.
	writeAt, releaseAt time.Time
	// eventNext is, for each event binding, the seq of the first queued
	// raw event it has not finished (none: the oldest queued); eventTries
	// are the event bindings' attempts at those events.
	eventNext  map[string]uint64
	eventTries tries
}

// empty reports whether w holds nothing a later pass needs. Its cause
// alone is not kept: with nothing done, attempted or accumulated for it,
// a pass that finds the same cause starts from the same place.
func (w *objectWork) empty() bool {
	return w.lastHandled == nil && len(w.done) == 0 && len(w.gaveUp) == 0 && w.tries.empty() && w.acc.empty() &&
		w.pending == nil && w.writeAt.IsZero() && w.releaseAt.IsZero() && len(w.eventNext) == 0 && w.eventTries.empty()
}

// objectWorks are the empty objectWork values that passes take and give
// back: a tick of an object with a timer is a pass, and most passes end with
// nothing in their work, so each would otherwise allocate one (168 bytes).
var objectWorks = sync.Pool{New: func() any { return new(objectWork) }}

// see records one informer notification.
func (o *object) see(c *informer.Object, typ string, initial, keepRaw bool, maxRaw int, now time.Time, log hclog.Logger) {
	if o.obj == nil || c.NewerThan(o.obj) {
		if o.obj == nil || o.obj.ResourceVersion != c.ResourceVersion {
			o.changed = now
		}
		o.obj = c
	}
	switch typ {
	case watchDeleted:
		o.gone = true
	case watchExited:
		o.exited = true
		if keepRaw {
			o.exitEvent = &rawEvent{typ: watchDeleted, obj: c}
		}
		return
	default: // in the informer's selector (again)
		o.exited, o.exitEvent, o.outside = false, nil, false
	}
	if initial {
		o.initial = true
	}
	if keepRaw {
		// Queued before the oldest is dropped, so that it is numbered
		// after the events the worker may have finished.
		o.queueRaw(rawEvent{typ: typ, obj: c})
		if len(o.events) > maxRaw {
			log.Warn("raw event queue full; dropping the oldest", "uid", o.uid, "name", c.Name)
			o.events = o.events[1:]
		}
	}
}

// queueRaw queues ev for the event bindings, numbered after the events
// queued before it. o's lock (handler.mu) must be held.
func (o *object) queueRaw(ev rawEvent) {
	ev.seq = 0
	if n := len(o.events); n > 0 {
		ev.seq = o.events[n-1].seq + 1
	}
	o.events = append(o.events, ev)
}

// atRest reports whether nothing of o's work is under way or scheduled: its
// latest state is settled, not being deleted, and it has no pending write,
// turn, retry, raw event, timer, daemon or exit report. o's lock
// (handler.mu) must be held.
func (o *object) atRest() bool {
	return o.obj != nil && o.settled == o.obj.ResourceVersion && !o.obj.Deleting && !o.gone && !o.exited && !o.initial &&
		(o.work == nil || o.work.empty()) && !o.daemonTimedOut &&
		len(o.events) == 0 && len(o.due) == 0 && len(o.exits) == 0 && len(o.daemons) == 0 && len(o.timers) == 0
}

// resetCause starts handling a new change.
func (o *object) resetCause(cause string) {
	w := o.work
	if w.cause == cause {
		return
	}
	w.cause = cause
	// Made when first written: most objects, once handled, keep none.
	w.done, w.gaveUp, w.tries = nil, nil, tries{}
	noteCauseReset(o)
	w.acc = accumulated{}
}

// markDone records that binding id is done with the cause.
func (o *object) markDone(id string) {
	if o.work.done == nil {
		o.work.done = map[string]bool{}
	}
	o.work.done[id] = true
}

// json is the JSON of the state the pass works on (view): what the cache
// keeps, sent as it is.
func (o *object) json() []byte { return o.cur.Raw }

// decoded is cur, decoded once per pass.
func (o *object) decoded() *unstructured.Unstructured {
	if o.view == nil {
		u, err := o.cur.Decode()
		if err != nil {
			// cur.Raw passed json.Valid as an object (informer.Read) or was
			// encoded from a decoded one (Encode), so this does not happen;
			// the metadata still names the object in Events.
			u = &unstructured.Unstructured{Object: map[string]any{}}
			u.SetNamespace(o.cur.Namespace)
			u.SetName(o.cur.Name)
			u.SetUID(o.cur.UID)
			u.SetResourceVersion(o.cur.ResourceVersion)
		}
		o.view = u
	}
	return o.view
}

// begin gives a pass its work: the one kept since an earlier pass, or an
// empty one.
func (o *object) begin() {
	if o.work == nil {
		o.work = objectWorks.Get().(*objectWork)
	}
}

// endPass drops what the pass decoded, and its work if nothing in it is
// needed later; o's lock (handler.mu) must be held.
func (o *object) endPass() {
	o.seen, o.cur, o.view = nil, nil, nil
	if w := o.work; w != nil {
		w.lastHandled, w.wrote = nil, written{}
		if w.empty() {
			*w = objectWork{}
			objectWorks.Put(w)
			o.work = nil
		}
	}
}
