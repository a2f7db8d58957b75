package lifecycle

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/progress"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestAGoHandlersResultAndDaemonPatchLandInStatus: a create binding with
// ResultsInStatus stores its result in status.<key> of the Widget (its
// status subresource), and a daemon that patches status and fails has
// that status written.
func TestAGoHandlersResultAndDaemonPatchLandInStatus(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	h := sdk.New("go-results", handlerOpts(t)...)
	h.OnCreate(widgets, func(_ context.Context, ev *sdk.Event) error {
		ev.SetResult(map[string]any{"copies": 2})
		return nil
	}, sdk.ResultsInStatus("create_fn"), sdk.Namespaces(ns))
	h.OnDaemon(widgets, func(_ context.Context, ev *sdk.Event) error {
		ev.PatchStatus(map[string]any{"message": "failed once"})
		return sdk.RetryAfter(errors.New("not yet"), time.Minute)
	}, sdk.Namespaces(ns), sdk.Restart())
	runHandler(t, h, addr)

	create(t, dyn, widgetGVR, widget(ns, "w", nil))
	got := waitObject(t, dyn, widgetGVR, ns, "w", "the result and the daemon's status", func(o *unstructured.Unstructured) bool {
		msg, _, _ := unstructured.NestedString(o.Object, "status", "message")
		_, ok, _ := unstructured.NestedFieldNoCopy(o.Object, "status", "create_fn")
		return msg == "failed once" && ok
	})
	want := map[string]any{"copies": int64(2)}
	if v, _, _ := unstructured.NestedMap(got.Object, "status", "create_fn"); !reflect.DeepEqual(v, want) {
		t.Errorf("status.create_fn = %v, want %v", v, want)
	}
}

// gaugeCRD is a resource whose schema wants status.reading to be an
// integer and has a status subresource, so that the API server refuses a
// result of another type stored there (422, naming the field).
const gaugeCRD = `{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "gauges.results.tether.dev"},
  "spec": {"group": "results.tether.dev", "scope": "Namespaced",
    "names": {"plural": "gauges", "singular": "gauge", "kind": "Gauge", "listKind": "GaugeList"},
    "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "status": {"type": "object", "properties": {"reading": {"type": "integer"}}}}}}}]}}`

// TestARefusedStatusResultIsDroppedAndTheRestWritten: the API server
// refuses the result a create stores in status.reading (a string where the
// schema wants an integer). The result is dropped with a Warning Event, as
// a refused annotation result is, and the hold and the progress are
// written without it: the create is not run again.
func TestARefusedStatusResultIsDroppedAndTheRestWritten(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	if err := controlplane.InstallCRD(context.Background(), dyn, gaugeCRD, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(controlplane.CRDGVR).Delete(context.Background(), "gauges.results.tether.dev", metav1.DeleteOptions{})
	})
	gauges := schema.GroupVersionResource{Group: "results.tether.dev", Version: "v1", Resource: "gauges"}
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var j journal
	h := sdk.New("gauge-results", handlerOpts(t)...)
	h.OnCreate(sdk.GVR(gauges.Group, gauges.Version, gauges.Resource), j.record(func(_ context.Context, ev *sdk.Event) error {
		ev.SetResult("high")
		return nil
	}), sdk.ResultsInStatus("reading"), sdk.Namespaces(ns))
	h.OnDelete(sdk.GVR(gauges.Group, gauges.Version, gauges.Resource), j.record(nil), sdk.Namespaces(ns))
	runHandler(t, h, addr)

	create(t, dyn, gauges, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "results.tether.dev/v1", "kind": "Gauge",
		"metadata": map[string]any{"name": "g", "namespace": ns}, "spec": map[string]any{},
	}})
	obj := waitObject(t, dyn, gauges, ns, "g", "held and recorded as handled", func(o *unstructured.Unstructured) bool {
		return heldBy("gauge-results")(o) && o.GetAnnotations()[progress.LastHandledKey("gauge-results")] != ""
	})
	eventually(t, "a Warning Event about the refused result", func() bool {
		return hasEvent(t, cp, ns, "g", "InvalidPatch", `refused the patch of handler "gauge-results"`)
	})
	if v, ok, _ := unstructured.NestedFieldNoCopy(obj.Object, "status", "reading"); ok {
		t.Errorf("the refused result was written: status.reading = %v", v)
	}
	if n := len(j.find(sdk.Create, "g")); n != 1 {
		t.Errorf("the create ran %d times, want once", n)
	}
}
