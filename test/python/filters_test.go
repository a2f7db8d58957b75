package pyhandler

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/progress"
	"github.com/tether-dev/tether/test/controlplane"
)

// kopfFiltered is a Kopf handler whose create binding has a callable
// when=, which the broker cannot run: the SDK calls it before the function.
const kopfFiltered = `import tether as kopf

@kopf.on.create("widgets", when=lambda spec, **_: spec.get("size", 0) > 3)
def big(name, patch, **_):
    patch.metadata.labels["filters.tether.dev/big"] = "yes"
    print("big saw", name)
    return {"big": True}
`

// TestACallableWhenSkipsTheFunctionAndAcksTheDelivery: of two widgets,
// the one the callable passes gets the function's label and result; the
// other is answered without the function, and the broker records both
// creates as handled (the last-handled annotation), so neither comes again.
func TestACallableWhenSkipsTheFunctionAndAcksTheDelivery(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	const name = "kopf-filtered"
	h := runKopfStyle(t, b.addr, name, ns, kopfFiltered)
	h.stderr.wait(t, welcomed, 1)

	createWidget(t, dyn, ns, "large", map[string]any{"size": int64(5)})
	createWidget(t, dyn, ns, "small", map[string]any{"size": int64(1)})
	handled := func(o *unstructured.Unstructured) bool {
		return o != nil && o.GetAnnotations()[progress.LastHandledKey(name)] != ""
	}
	// The result goes to the status subresource in a write of its own,
	// after the one that records the create as handled.
	large := waitWidget(t, dyn, ns, "large", "handled, with its result in status", func(o *unstructured.Unstructured) bool {
		if !handled(o) {
			return false
		}
		_, stored, _ := unstructured.NestedFieldNoCopy(o.Object, "status", "big")
		return stored
	})
	small := waitWidget(t, dyn, ns, "small", "handled", handled)

	if got := large.GetLabels()["filters.tether.dev/big"]; got != "yes" {
		t.Errorf("the large widget's label is %q, want the function's \"yes\"", got)
	}
	if got, _, _ := unstructured.NestedBool(large.Object, "status", "big", "big"); !got {
		t.Errorf("the large widget's status is %v, want the function's result in status.big", large.Object["status"])
	}
	if _, ok := small.GetLabels()["filters.tether.dev/big"]; ok {
		t.Error("the small widget has the function's label: the callable did not stop it")
	}
	if got, ok, _ := unstructured.NestedFieldNoCopy(small.Object, "status", "big"); ok {
		t.Errorf("the small widget has a result %v: the function ran", got)
	}
	if n := h.stdout.count("big saw small"); n != 0 {
		t.Errorf("the function ran for the small widget %d times", n)
	}
	if n := h.stdout.count("big saw large"); n != 1 {
		t.Errorf("the function ran for the large widget %d times, want 1", n)
	}
}
