package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/tether-dev/tether/test/controlplane"
)

var widgetGVR = controlplane.WidgetGVR

const (
	ourFinalizer   = "tether.dev/test"
	otherFinalizer = "other.example.com/keep"

	// eventTimeout bounds every wait for an API state or informer event.
	eventTimeout = 30 * time.Second
)

// widgetClient makes sure the Widget CRD (widgets.test.tether.dev, created by
// the harness through the dynamic client on apiextensions.k8s.io/v1) exists
// and is Established, and returns an admin dynamic client.
func widgetClient(t *testing.T, cp *controlplane.ControlPlane) dynamic.Interface {
	t.Helper()
	return cp.EnsureWidgetCRD(t)
}

func newWidget(name string, finalizers ...string) *unstructured.Unstructured {
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1",
		"kind":       "Widget",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"size": int64(3)},
	}}
	if len(finalizers) > 0 {
		w.SetFinalizers(finalizers)
	}
	return w
}

// event is one notification delivered by the informer.
type event struct {
	Type string // ADDED, MODIFIED or DELETED
	Obj  *unstructured.Unstructured
}

// watchWidgets runs a dynamic informer on widgets in ns until the test ends
// and returns its events.
func watchWidgets(t *testing.T, dyn dynamic.Interface, ns string) <-chan event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	inf := factory.ForResource(widgetGVR).Informer()
	events := make(chan event, 256)
	send := func(typ string, obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		select {
		case events <- event{Type: typ, Obj: u}:
		case <-ctx.Done():
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { send("ADDED", obj) },
		UpdateFunc: func(_, obj any) { send("MODIFIED", obj) },
		DeleteFunc: func(obj any) { send("DELETED", obj) },
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	syncCtx, syncCancel := context.WithTimeout(ctx, eventTimeout)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		t.Fatal("the widget informer did not sync")
	}
	return events
}

// expectEvent waits for the first event of type typ whose object satisfies
// match, skipping others.
func expectEvent(t *testing.T, events <-chan event, typ, what string, match func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	timer := time.NewTimer(eventTimeout)
	defer timer.Stop()
	for {
		select {
		case ev := <-events:
			if ev.Type == typ && match(ev.Obj) {
				return ev.Obj
			}
			t.Logf("informer: skipping %s %s rv=%s finalizers=%v", ev.Type, ev.Obj.GetName(), ev.Obj.GetResourceVersion(), ev.Obj.GetFinalizers())
		case <-timer.C:
			t.Fatalf("no %s event from the informer within %s: %s", typ, eventTimeout, what)
			return nil
		}
	}
}

// patchOp is one RFC 6902 JSON patch operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// addFinalizerPatch adds f to obj's finalizers, guarded so that it fails if
// the object changed since obj was read: on the list itself when there is
// one, else on the resourceVersion (a JSON-patch test cannot test absence).
func addFinalizerPatch(obj *unstructured.Unstructured, f string) []patchOp {
	fins := obj.GetFinalizers()
	if len(fins) == 0 {
		return []patchOp{
			{Op: "test", Path: "/metadata/resourceVersion", Value: obj.GetResourceVersion()},
			{Op: "add", Path: "/metadata/finalizers", Value: []string{f}},
		}
	}
	return []patchOp{
		{Op: "test", Path: "/metadata/finalizers", Value: fins},
		{Op: "add", Path: "/metadata/finalizers/-", Value: f},
	}
}

// removeFinalizerPatch removes f from obj's finalizers, testing the exact
// index and value first so that it never removes another entry.
func removeFinalizerPatch(t *testing.T, obj *unstructured.Unstructured, f string) []patchOp {
	t.Helper()
	i := slices.Index(obj.GetFinalizers(), f)
	if i < 0 {
		t.Fatalf("%s has no finalizer %s: %v", obj.GetName(), f, obj.GetFinalizers())
	}
	path := "/metadata/finalizers/" + strconv.Itoa(i)
	return []patchOp{
		{Op: "test", Path: path, Value: f},
		{Op: "remove", Path: path},
	}
}

// jsonPatch applies ops to the named object.
func jsonPatch(ctx context.Context, c dynamic.ResourceInterface, name string, ops []patchOp) (*unstructured.Unstructured, error) {
	body, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	return c.Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{})
}
