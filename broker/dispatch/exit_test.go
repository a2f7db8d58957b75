package dispatch

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/util/workqueue"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/resource"
)

// TestExitFromAFilteredInformerIsConfirmedByARead: a filtered informer's
// "deleted" is only an exit until a read says the object is gone. An object
// still there is outside (its hold is for the pass to release), and the raw
// DELETED is not delivered; one not found, or found under another UID, is
// gone, with the raw DELETED for event bindings.
func TestExitFromAFilteredInformerIsConfirmedByARead(t *testing.T) {
	widgets := resource.Resource{GroupVersionResource: schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}}
	stored := func(uid string) kruntime.Object {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("test.tether.dev/v1")
		u.SetKind("Widget")
		u.SetNamespace("ns")
		u.SetName("w")
		u.SetUID(types.UID(uid))
		u.SetResourceVersion("5") // the relabelling's, which the exit carries too
		u.SetLabels(map[string]string{"keep": "no"})
		return u
	}
	for _, tc := range []struct {
		name        string
		objects     []kruntime.Object
		wantGone    bool
		wantOutside bool
	}{
		{"still there", []kruntime.Object{stored("x")}, false, true},
		{"deleted", nil, true, false},
		{"re-created under the name", []kruntime.Object{stored("x2")}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(kruntime.NewScheme(),
				map[schema.GroupVersionResource]string{widgets.GroupVersionResource: "WidgetList"}, tc.objects...)
			rt := newController(New(Options{Client: client}), "h", nil, "", nil)
			rt.byResource = map[schema.GroupVersionResource][]*binding.Binding{widgets.GroupVersionResource: {{ID: "e", Kind: binding.Event}}}
			rt.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.UID]())
			defer rt.queue.ShutDown()
			h := rt.eventHandler(&widgets, true)
			last := &informer.Object{Namespace: "ns", Name: "w", UID: "x", ResourceVersion: "5", Raw: []byte(`{}`)}
			h.OnAdd(last, false)
			h.OnDelete(last)

			o := rt.objects["x"]
			if o == nil || o.gone || !o.exited {
				t.Fatalf("after the filtered informer's delete: %+v, want an exit to confirm", o)
			}
			if err := rt.reconciler.confirmExit(context.Background(), o); err != nil {
				t.Fatal(err)
			}
			if o.gone != tc.wantGone || o.outside != tc.wantOutside || o.exited {
				t.Errorf("gone %v, outside %v, exited %v; want gone %v, outside %v", o.gone, o.outside, o.exited, tc.wantGone, tc.wantOutside)
			}
			var deleted int
			for _, ev := range o.events {
				if ev.typ == watchDeleted {
					deleted++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.wantGone]; deleted != want {
				t.Errorf("%d raw DELETED events queued, want %d", deleted, want)
			}
			if tc.wantOutside && string(o.obj.Raw) == "{}" {
				t.Errorf("outside with the exit's content %s, want the state read", o.obj.Raw)
			}
			// Back in the selector: the informer shows it again.
			if tc.wantOutside {
				h.OnAdd(&informer.Object{Namespace: "ns", Name: "w", UID: "x", ResourceVersion: "11", Raw: []byte(`{}`)}, false)
				if o.outside || o.exited {
					t.Errorf("back in the selector: outside %v, exited %v", o.outside, o.exited)
				}
			}
		})
	}
}

// TestInformerKeysPushTheSharedSelector: with push, each resource's
// informers carry the selector all its bindings share; without, none.
func TestInformerKeysPushTheSharedSelector(t *testing.T) {
	widgets := resource.Resource{GroupVersionResource: schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}}
	secrets := resource.Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}}
	keep := mustSelector(t, "keep=yes")
	bs := []*binding.Binding{
		{ID: "a", Kind: binding.Create, Resource: widgets, Namespaces: []string{"n1", "n2"}, Labels: keep},
		{ID: "b", Kind: binding.Timer, Resource: widgets, Namespaces: []string{"n2"}, Labels: mustSelector(t, "keep=yes,tier=x")},
		{ID: "c", Kind: binding.Create, Resource: secrets, Labels: mustSelector(t, "")},
	}
	got := informerKeys(bs, true)
	want := []informer.Key{
		{Resource: widgets.GroupVersionResource, Namespace: "n1", Labels: "keep=yes"},
		{Resource: widgets.GroupVersionResource, Namespace: "n2", Labels: "keep=yes"},
		{Resource: secrets.GroupVersionResource},
	}
	if len(got) != len(want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("key %d: %v, want %v", i, got[i], want[i])
		}
	}
	for _, k := range informerKeys(bs, false) {
		if k.Labels != "" {
			t.Errorf("without push: %v", k)
		}
	}
}

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}
