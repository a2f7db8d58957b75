package dispatch

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/resource"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// TestRelistThatReplacesAnObjectEndsTheOldOne: a relist after a watch gap
// hands the informer's subscribers X (deleted meanwhile) and X' (created
// under the same name) as one update. X must count as gone, so that its
// timers and daemons stop, and X' is another object.
func TestRelistThatReplacesAnObjectEndsTheOldOne(t *testing.T) {
	rt := newController(New(Options{}), "h", nil, "", nil)
	rt.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.UID]())
	defer rt.queue.ShutDown()
	obj := func(uid, rv string) *informer.Object {
		return &informer.Object{Namespace: "ns", Name: "w", UID: types.UID(uid), ResourceVersion: rv, Raw: []byte(`{}`)}
	}
	h := rt.eventHandler(&resource.Resource{}, false)
	h.OnAdd(obj("x", "1"), true)
	h.OnUpdate(obj("x", "1"), obj("x2", "5"))

	rt.mu.Lock()
	defer rt.mu.Unlock()
	if o := rt.objects["x"]; o == nil || !o.gone {
		t.Errorf("X after the relist: %+v, want it gone", o)
	}
	if o := rt.objects["x2"]; o == nil || o.gone || o.obj.ResourceVersion != "5" {
		t.Errorf("X' after the relist: %+v, want it live at resourceVersion 5", o)
	}
	if n := rt.queue.Len(); n != 2 {
		t.Errorf("%d objects queued, want 2 (X to stop, X' to start)", n)
	}
}

// TestDaemonExitFloodIsBounded: a handler that sends DaemonExited over and
// over leaves at most one report per instance and daemon binding waiting;
// reports for what is not a daemon binding, and repeats, are dropped as
// they arrive.
func TestDaemonExitFloodIsBounded(t *testing.T) {
	rt := newController(New(Options{}), "h", nil, "", nil)
	rt.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.UID]())
	defer rt.queue.ShutDown()
	res := resource.Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}}
	rt.byResource = map[schema.GroupVersionResource][]*binding.Binding{res.GroupVersionResource: {
		{ID: "d", Kind: binding.Daemon}, {ID: "c", Kind: binding.Create},
	}}
	running, other := &session.Instance{ID: "a"}, &session.Instance{ID: "b"}
	o := &object{work: &objectWork{}, uid: "x", res: &res, observed: observed{daemons: map[string]*daemon{"d": {inst: running}}}}
	rt.objects["x"] = o
	for range 10000 {
		for _, in := range []*session.Instance{running, other} {
			for _, id := range []string{"d", "c", "not-a-binding"} {
				rt.daemonExited(in, &tetherv1.DaemonExited{Uid: "x", BindingId: id, Failed: true, Message: "boom"})
			}
		}
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(o.exits) != 2 || o.exits[0].msg.GetBindingId() != "d" || o.exits[1].msg.GetBindingId() != "d" {
		t.Errorf("%d exit reports waiting, want one per instance for the daemon binding", len(o.exits))
	}
}
