package lifecycle

import (
	"context"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestLostRaceIsWrittenOnTheNextState is rule 4: the broker's write is a
// JSON patch guarded by a test of the object as it read it. When another
// controller changes the object meanwhile (here it adds its finalizer
// while the handler's create runs), the guard fails and the API server
// answers 422, with no more said. That is a lost race, not a refusal: the
// write is made again on the object's next state, the handler's label
// included, and no Warning Event says otherwise. (The chaos checker's first
// run found this: kube-apiserver 1.37 no longer says "test failed".)
func TestLostRaceIsWrittenOnTheNextState(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)

	inCreate, letGo := make(chan struct{}), make(chan struct{})
	h := sdk.New("racer", handlerOpts(t)...)
	h.OnCreate(widgets, func(_ context.Context, ev *sdk.Event) error {
		close(inCreate)
		<-letGo
		ev.SetLabel("racer.example.com/seen", "yes")
		return nil
	}, sdk.Namespaces(ns))
	h.OnDelete(widgets, func(context.Context, *sdk.Event) error { return nil }, sdk.Namespaces(ns))
	runHandler(t, h, addr)

	create(t, dyn, widgetGVR, widget(ns, "w", map[string]any{"size": int64(1)}))
	<-inCreate
	foreign, err := json.Marshal([]map[string]any{{"op": "add", "path": "/metadata/finalizers", "value": []string{"example.com/foreign"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(widgetGVR).Namespace(ns).Patch(context.Background(), "w", types.JSONPatchType, foreign, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	close(letGo)

	obj := waitObject(t, dyn, widgetGVR, ns, "w", "held and labelled", func(o *unstructured.Unstructured) bool {
		return o != nil && hold.Has(o, "racer") && o.GetLabels()["racer.example.com/seen"] == "yes"
	})
	if fins := obj.GetFinalizers(); len(fins) != 2 {
		t.Errorf("finalizers %v, want the foreign one and the hold", fins)
	}
	for _, e := range events(t, cp, ns, "w") {
		if e.Type == "Warning" {
			t.Errorf("Warning Event %s: %s", e.Reason, e.Message)
		}
	}
	removeFinalizers(t, dyn, obj)
}
