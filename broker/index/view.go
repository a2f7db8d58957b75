package index

import (
	"sync"

	"github.com/hashicorp/go-hclog"
	"k8s.io/client-go/tools/cache"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// The event types of Indexed.
const (
	added    = "ADDED"
	modified = "MODIFIED"
	deleted  = "DELETED"
)

// view turns informer notifications into the changes of one binding's
// view: it knows which objects (by UID) the handler was sent as matching.
type view struct {
	b   *binding.Binding
	q   *queue
	log hclog.Logger

	mu sync.Mutex
	in map[string]bool
}

func (v *view) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { v.saw(obj, false) },
		UpdateFunc: func(oldObj, obj any) {
			// A relist may turn a deletion and a creation under one name
			// into one update: the old object leaves the view first.
			if prev, ok := oldObj.(*informer.Object); ok {
				if c, ok := obj.(*informer.Object); ok && prev.UID != c.UID {
					v.saw(prev, true)
				}
			}
			v.saw(obj, false)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			v.saw(obj, true)
		},
	}
}

// saw queues what one notification changes in the view: the object enters
// it (ADDED), changes in it (MODIFIED) or leaves it (DELETED), or nothing.
func (v *view) saw(obj any, gone bool) {
	c, ok := obj.(*informer.Object)
	if !ok {
		return
	}
	match := !gone && v.matches(c)
	uid := string(c.UID)
	v.mu.Lock()
	was := v.in[uid]
	if match {
		v.in[uid] = true
	} else {
		delete(v.in, uid)
	}
	v.mu.Unlock()
	typ := ""
	switch {
	case match && was:
		typ = modified
	case match:
		typ = added
	case was:
		typ = deleted
	default:
		return
	}
	v.q.push(&tetherv1.Indexed{BindingId: v.b.ID, EventType: typ, Object: c.Raw})
}

// matches reports whether c passes the binding's filters; an object that
// cannot be decoded or whose CEL fails does not (with a warning, as the
// dispatcher does).
func (v *view) matches(c *informer.Object) bool {
	if !v.b.InNamespace(c.Namespace) {
		return false
	}
	if !v.b.ReadsObject() {
		return true
	}
	u, err := c.Decode()
	if err == nil {
		var ok bool
		if ok, err = v.b.Matches(u, nil); err == nil {
			return ok
		}
	}
	if v.log != nil {
		v.log.Warn("index binding's filter failed; the object counts as not matching", "binding", v.b.ID,
			"namespace", c.Namespace, "name", c.Name, "error", err)
	}
	return false
}
