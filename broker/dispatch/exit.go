package dispatch

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/informer"
)

// An informer filtered by a pushed-down label selector (binding.Pushdown)
// says "deleted" both of an object that was deleted and of one whose
// labels changed so that it left the selector, and sends both with the
// object's previous content. An exit must not be taken for a deletion: the
// object stays, and the handler's hold on it must be released (rule 3e),
// its timers and daemons stopped, while a deletion would only forget it
// and leave the hold in place. So an exit is confirmed by reading the
// object; while it is outside, every pass reads it again, since no
// informer will show it any more.

// confirmExit reads an object that left a filtered informer, or is
// outside one (reconcile looks first, under the lock it takes anyway): gone (not found, or another UID under the name) makes it
// gone, with the raw DELETED for event bindings; still there makes the
// state read its latest, and marks it outside.
func (r *reconciler) confirmExit(ctx context.Context, o *object) error {
	r.mu.Lock()
	check := o.exited || o.outside
	last := o.obj
	r.mu.Unlock()
	if !check || last == nil {
		return nil
	}
	ri := r.opts.Client.Resource(o.res.GroupVersionResource)
	u, err := ri.Namespace(last.Namespace).Get(ctx, last.Name, metav1.GetOptions{})
	gone := apierrors.IsNotFound(err) || err == nil && u.GetUID() != o.uid
	if err != nil && !gone {
		return fmt.Errorf("reading %s %s/%s, which left the informer's selector or was deleted: %w",
			o.res.Resource, last.Namespace, last.Name, err)
	}
	var fresh *informer.Object
	if !gone {
		if fresh, err = informer.Encode(u); err != nil {
			return fmt.Errorf("reading %s %s/%s: %w", o.res.Resource, last.Namespace, last.Name, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !o.exited && !o.outside {
		return nil // the informer shows it again: it came back into the selector
	}
	if gone {
		o.gone, o.exited, o.outside = true, false, false
		if o.exitEvent != nil {
			o.queueRaw(*o.exitEvent)
			o.exitEvent = nil
		}
		return nil
	}
	// The exit's content is the object before it left, under the
	// resourceVersion of the change that made it leave: the read is the
	// truth, even at the same resourceVersion.
	o.obj = fresh
	o.exited, o.exitEvent, o.outside = false, nil, true
	return nil
}
