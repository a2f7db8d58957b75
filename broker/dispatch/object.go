package dispatch

import (
	"github.com/hashicorp/go-hclog"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/resource"
)

const (
	watchAdded    = "ADDED"
	watchModified = "MODIFIED"
	watchDeleted  = "DELETED"
)

// rawEvent is one watch event kept for event bindings.
type rawEvent struct {
	typ string
	obj *unstructured.Unstructured
}

// object is what one handler's runtime knows about one object (one UID).
// The fields above the line are written by informer handlers and read by
// workers under runtime.mu; the ones below belong to the one worker that
// holds the UID (the queue never gives a UID to two workers at once).
type object struct {
	uid types.UID
	res resource.Resource

	obj     *unstructured.Unstructured // latest state seen; never mutated
	gone    bool                       // the watch said deleted
	initial bool                       // seen in an initial list: resume applies
	events  []rawEvent                 // pending raw events, oldest first

	// ---- worker-owned ----

	// lastHandled is the essence this broker last recorded, which may be
	// newer than what the informer shows in the annotation.
	lastHandled map[string]any
	// cause identifies the change being handled; done and attempts belong
	// to it and are reset when it changes.
	cause    string
	done     map[string]bool
	attempts map[string]int
	acc      accumulated
	// pending is a write that was refused (conflict) and must be retried on
	// the next state before anything else happens.
	pending *write
	// eventDone marks the bindings that finished the head raw event.
	eventDone map[string]bool
}

// see records one informer notification.
func (o *object) see(u *unstructured.Unstructured, typ string, initial, keepRaw bool, maxRaw int, log hclog.Logger) {
	if o.obj == nil || newerRV(u, o.obj) {
		o.obj = u
	}
	if typ == watchDeleted {
		o.gone = true
	}
	if initial {
		o.initial = true
	}
	if keepRaw {
		if len(o.events) >= maxRaw {
			log.Warn("raw event queue full; dropping the oldest", "uid", o.uid, "name", u.GetName())
			o.events = o.events[1:]
		}
		o.events = append(o.events, rawEvent{typ: typ, obj: u})
	}
}

// resetCause starts handling a new change.
func (o *object) resetCause(cause string) {
	if o.cause == cause {
		return
	}
	o.cause = cause
	o.done = map[string]bool{}
	o.attempts = map[string]int{}
	o.acc = accumulated{}
}
