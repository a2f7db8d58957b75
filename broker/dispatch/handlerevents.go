package dispatch

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// HandlerEvents posts the Kubernetes Events a handler put in an ack, as
// the identity of the instance that sent it (nil in insecure mode). Post
// must not block: an ack's Events never hold up or change its outcome.
type HandlerEvents interface {
	Post(handler string, as *authenticationv1.UserInfo, about corev1.ObjectReference, events []*tetherv1.HandlerEvent)
}

type nopHandlerEvents struct{}

func (nopHandlerEvents) Post(string, *authenticationv1.UserInfo, corev1.ObjectReference, []*tetherv1.HandlerEvent) {
}

// postEvents hands ack's Events, if any, to the poster; an Event that
// names no object is about o.
func (dl *deliverer) postEvents(o *object, in *session.Instance, ack *tetherv1.Ack) {
	events := ack.GetEvents()
	if len(events) == 0 || in == nil {
		return
	}
	obj := o.decoded()
	about := corev1.ObjectReference{
		APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(),
		Name: obj.GetName(), UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
	}
	dl.opts.HandlerEvents.Post(dl.name, in.User, about, events)
}
