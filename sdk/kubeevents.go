package sdk

import (
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// EventType is the type of a Kubernetes Event a handler function posts.
type EventType int

// The Kubernetes Event types.
const (
	Normal EventType = iota + 1
	Warning
)

// ObjectRef names the object a Kubernetes Event is about, when it is not
// the delivery's: APIVersion ("v1", "apps/v1"), Kind and Name are needed.
type ObjectRef struct {
	APIVersion, Kind, Namespace, Name, UID string
}

// Record posts a Kubernetes Event about the delivery's object, as
// kubectl describe shows it: reason is a short CamelCase word (1 to 128
// bytes), message is cut at 1024 bytes. The Event goes in the ack, whatever
// the function's outcome, and the broker posts it as the handler's identity
// (whose RBAC needs create and patch on events), counting repeats into one
// Event and rate-limiting floods as client-go's recorder does. At most 10
// per delivery: later ones, and invalid ones, are dropped with a log line.
// A daemon has no ack to carry Events: there it is ignored.
func (e *Event) Record(typ EventType, reason, message string) {
	e.record(nil, typ, reason, message)
}

// RecordAbout posts a Kubernetes Event about obj, another object (a child
// the function made, say), as Record does. The handler's RBAC decides
// whether it may post Events in obj's namespace.
func (e *Event) RecordAbout(obj ObjectRef, typ EventType, reason, message string) {
	e.record(&tetherv1.EventObject{ApiVersion: obj.APIVersion, Kind: obj.Kind, Namespace: obj.Namespace, Name: obj.Name, Uid: obj.UID},
		typ, reason, message)
}

func (e *Event) record(about *tetherv1.EventObject, typ EventType, reason, message string) {
	if e.ignore("Record") {
		return
	}
	pt := tetherv1.HandlerEvent_TYPE_NORMAL
	switch {
	case typ == Warning:
		pt = tetherv1.HandlerEvent_TYPE_WARNING
	case typ != Normal:
		e.Logger().Error("dropping a Kubernetes Event of no known type", "type", int(typ), "reason", reason)
		return
	}
	if reason == "" || len(reason) > tetherv1.MaxEventReasonBytes {
		e.Logger().Error("dropping a Kubernetes Event: its reason must be 1 to 128 bytes", "reason", reason)
		return
	}
	if about != nil && (about.ApiVersion == "" || about.Kind == "" || about.Name == "") {
		e.Logger().Error("dropping a Kubernetes Event: its object needs an APIVersion, a Kind and a Name", "reason", reason)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.events) >= tetherv1.MaxAckEvents {
		e.Logger().Warn("dropping a Kubernetes Event: a delivery carries at most 10", "reason", reason)
		return
	}
	e.events = append(e.events, &tetherv1.HandlerEvent{Type: pt, Reason: reason, Message: truncate(message), Regarding: about})
}

// recorded returns the Events the function posted.
func (e *Event) recorded() []*tetherv1.HandlerEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.events
}
