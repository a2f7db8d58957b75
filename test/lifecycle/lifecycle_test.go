package lifecycle

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/progress"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestCreateUpdateDeleteOnCustomResource walks one Widget through its life:
// create is delivered once and its result, the last-handled state and the
// hold land in one write; an update carries old, new and the diff; delete
// runs the delete handler and then the hold is released, so the object goes.
func TestCreateUpdateDeleteOnCustomResource(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var j journal
	h := sdk.New("widgets", handlerOpts(t)...)
	h.OnCreate(widgets, j.record(func(_ context.Context, ev *sdk.Event) error {
		ev.SetLabel("handled-by", "widgets")
		ev.PatchStatus(map[string]any{"phase": "Ready"})
		ev.SetResult(map[string]any{"size": ev.Object().Object["spec"].(map[string]any)["size"]})
		return nil
	}), sdk.ID("create"), sdk.Namespaces(ns))
	h.OnUpdate(widgets, j.record(nil), sdk.ID("update"), sdk.Namespaces(ns))
	h.OnDelete(widgets, j.record(nil), sdk.ID("delete"), sdk.Namespaces(ns))
	runHandler(t, h, addr)

	create(t, dyn, widgetGVR, widget(ns, "w1", map[string]any{"size": int64(3)}))
	j.waitCount(t, sdk.Create, "w1", 1)
	obj := waitObject(t, dyn, widgetGVR, ns, "w1", "handled, held and ready", func(o *unstructured.Unstructured) bool {
		phase, _, _ := unstructured.NestedString(o.Object, "status", "phase")
		return o != nil && hold.Has(o, "widgets") && phase == "Ready"
	})
	if got := obj.GetLabels()["handled-by"]; got != "widgets" {
		t.Errorf("label from the handler's patch: got %q", got)
	}
	if got := obj.GetAnnotations()[progress.ResultKey("widgets", "create")]; got != `{"size":3}` {
		t.Errorf("stored result: got %q", got)
	}
	if _, ok := obj.GetAnnotations()[progress.LastHandledKey("widgets")]; !ok {
		t.Error("no last-handled state on the object")
	}

	setSpec(t, cp, ns, "w1", map[string]any{"size": int64(5)})
	up := j.waitCount(t, sdk.Update, "w1", 1)[0]
	if got, _, _ := unstructured.NestedInt64(up.Old().Object, "spec", "size"); got != 3 {
		t.Errorf("update old spec.size = %d, want 3", got)
	}
	if got, _, _ := unstructured.NestedInt64(up.Object().Object, "spec", "size"); got != 5 {
		t.Errorf("update new spec.size = %d, want 5", got)
	}
	wantDiff := []sdk.Change{{Op: "change", Path: []string{"spec", "size"}, Old: float64(3), New: float64(5)}}
	if !equalJSON(up.Diff, wantDiff) {
		t.Errorf("update diff = %+v, want %+v", up.Diff, wantDiff)
	}
	if n := len(j.find(sdk.Create, "w1")); n != 1 {
		t.Errorf("create delivered %d times, want once", n)
	}

	del(t, dyn, widgetGVR, ns, "w1")
	j.waitCount(t, sdk.Delete, "w1", 1)
	waitObject(t, dyn, widgetGVR, ns, "w1", "gone", gone)
}

// TestHoldOnlyForDeleteBindingsAndOthersFinalizersSurvive checks the hold
// contract's first and fourth rules: a handler without a delete binding
// never adds a hold, and releasing a hold never removes another
// controller's finalizer.
func TestHoldOnlyForDeleteBindingsAndOthersFinalizersSurvive(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	var creates, deletes journal
	noHold := sdk.New("no-hold", handlerOpts(t)...)
	noHold.OnCreate(widgets, creates.record(nil), sdk.Namespaces(ns))
	noHold.OnUpdate(widgets, creates.record(nil), sdk.Namespaces(ns))
	runHandler(t, noHold, addr)
	holder := sdk.New("holder", handlerOpts(t)...)
	holder.OnDelete(widgets, deletes.record(nil), sdk.Namespaces(ns))
	runHandler(t, holder, addr)

	w := widget(ns, "shared", map[string]any{"size": int64(1)})
	w.SetFinalizers([]string{"other.example.com/keep"})
	create(t, dyn, widgetGVR, w)
	creates.waitCount(t, sdk.Create, "shared", 1)
	obj := waitObject(t, dyn, widgetGVR, ns, "shared", "held by holder", func(o *unstructured.Unstructured) bool {
		return o != nil && hold.Has(o, "holder")
	})
	if hold.Has(obj, "no-hold") {
		t.Errorf("a handler without delete bindings holds the object: %v", obj.GetFinalizers())
	}

	del(t, dyn, widgetGVR, ns, "shared")
	deletes.waitCount(t, sdk.Delete, "shared", 1)
	obj = waitObject(t, dyn, widgetGVR, ns, "shared", "hold released", func(o *unstructured.Unstructured) bool {
		return o != nil && !hold.Has(o, "holder")
	})
	if !slices.Equal(obj.GetFinalizers(), []string{"other.example.com/keep"}) {
		t.Fatalf("finalizers after release = %v, want only the other controller's", obj.GetFinalizers())
	}
	removeFinalizers(t, dyn, obj)
	waitObject(t, dyn, widgetGVR, ns, "shared", "gone", gone)
}

func equalJSON(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}
