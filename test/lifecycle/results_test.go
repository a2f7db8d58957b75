package lifecycle

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
