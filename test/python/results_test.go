package pyhandler

import (
	"context"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/progress"
	"github.com/tether-dev/tether/test/controlplane"
)

// trinketCRD is a namespaced resource without a status subresource: what a
// handler writes in status goes with the object.
const trinketCRD = `{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "trinkets.results.tether.dev"},
  "spec": {"group": "results.tether.dev", "scope": "Namespaced",
    "names": {"plural": "trinkets", "singular": "trinket", "kind": "Trinket", "listKind": "TrinketList"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}`

var trinketGVR = schema.GroupVersionResource{Group: "results.tether.dev", Version: "v1", Resource: "trinkets"}

// kopfResults returns values as Kopf's results example does: under the
// function's name in status, on a resource with a status subresource and
// on one without; results="annotation" keeps the broker's annotation.
const kopfResults = `import tether as kopf

@kopf.on.create("widgets")
def create_fn(**_):
    return {"copies": 2, "note": "made"}

@kopf.on.create("widgets", id="kept", results="annotation")
def in_annotation(**_):
    return "kept"

@kopf.on.create("trinkets")
def make_trinket(**_):
    return 100
`

// TestAReturnedValueLandsInStatusUnderTheFunctionsName: a Kopf-style
// handler's returned dict is in status.create_fn of a Widget (written to
// its status subresource), its returned number in status.make_trinket of a
// Trinket (no subresource: written with the object, beside what status
// held), and a binding with results="annotation" stores its value in
// the broker's annotation as before.
func TestAReturnedValueLandsInStatusUnderTheFunctionsName(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	if err := controlplane.InstallCRD(context.Background(), dyn, trinketCRD, waitTimeout); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(controlplane.CRDGVR).Delete(context.Background(), "trinkets.results.tether.dev", metav1.DeleteOptions{})
	})
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	h := runKopfStyle(t, b.addr, "py-results", ns, kopfResults)
	h.stderr.wait(t, welcomed, 1)

	createWidget(t, dyn, ns, "w", nil)
	got := waitWidget(t, dyn, ns, "w", "status.create_fn set", func(u *unstructured.Unstructured) bool {
		_, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "create_fn", "copies")
		return ok
	})
	want := map[string]any{"copies": int64(2), "note": "made"}
	if v, _, _ := unstructured.NestedMap(got.Object, "status", "create_fn"); !reflect.DeepEqual(v, want) {
		t.Errorf("status.create_fn = %v, want %v", v, want)
	}
	key := progress.ResultKey("py-results", "kept")
	eventually(t, "the annotation result", func() bool {
		return getWidget(t, dyn, ns, "w").GetAnnotations()[key] == `"kept"`
	})
	if _, ok := got.Object["status"].(map[string]any)["in_annotation"]; ok {
		t.Error("the annotation binding's result is also in status")
	}

	trinket := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "results.tether.dev/v1", "kind": "Trinket",
		"metadata": map[string]any{"name": "t", "namespace": ns},
		"status":   map[string]any{"make_trinket": "before", "other": "kept"},
	}}
	if _, err := dyn.Resource(trinketGVR).Namespace(ns).Create(context.Background(), trinket, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "status.make_trinket of the trinket", func() bool {
		u, err := dyn.Resource(trinketGVR).Namespace(ns).Get(context.Background(), "t", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "make_trinket")
		other, _, _ := unstructured.NestedString(u.Object, "status", "other")
		return v == int64(100) && other == "kept"
	})
}

// kopfDaemons patches status in its daemons as Kopf's daemons example
// does: before raising TemporaryError, and in a run that returns a value.
const kopfDaemons = `import tether as kopf

@kopf.daemon("widgets", restart=True, when="has(object.spec.flaky)")
def flaky(patch, retry, **_):
    patch.status["message"] = f"failed {retry + 1} times"
    raise kopf.TemporaryError("not yet", delay=60)

@kopf.daemon("widgets", when="has(object.spec.brief)")
def brief(patch, **_):
    patch.status["message"] = "finished"
    return {"runs": 1}
`

// TestADaemonsPatchIsWrittenAtTheEndOfEachRun: the status a daemon puts in
// its patch before raising TemporaryError is on the object, as is the
// patch and the returned value of a daemon that returns by itself.
func TestADaemonsPatchIsWrittenAtTheEndOfEachRun(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	h := runKopfStyle(t, b.addr, "py-daemon-patch", ns, kopfDaemons)
	h.stderr.wait(t, welcomed, 1)

	createWidget(t, dyn, ns, "f", map[string]any{"flaky": true})
	waitWidget(t, dyn, ns, "f", "status.message from the failed run", func(u *unstructured.Unstructured) bool {
		m, _, _ := unstructured.NestedString(u.Object, "status", "message")
		return m == "failed 1 times"
	})

	createWidget(t, dyn, ns, "b", map[string]any{"brief": true})
	got := waitWidget(t, dyn, ns, "b", "status.message and status.brief", func(u *unstructured.Unstructured) bool {
		_, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "brief")
		return ok
	})
	want := map[string]any{"message": "finished", "brief": map[string]any{"runs": int64(1)}}
	if s, _, _ := unstructured.NestedMap(got.Object, "status"); !reflect.DeepEqual(s, want) {
		t.Errorf("status = %v, want %v", s, want)
	}
}
