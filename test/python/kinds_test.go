package pyhandler

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestEveryLifecycleKindIsDelivered walks a Widget through the bindings
// of every lifecycle kind that --every-kind adds: create, the raw event,
// the daemon's start, an update with its diff, the field binding with old
// and new values, and on deletion the daemon's stop and the delete, before
// the widget goes.
func TestEveryLifecycleKindIsDelivered(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	h := startHandler(t, b.addr, "py-kinds", "--namespace", ns, "--every-kind")
	h.stdout.wait(t, welcomed, 1)
	w := ns + "/w"

	createWidget(t, dyn, ns, "w", map[string]any{"size": int64(1)})
	h.stdout.wait(t, "delivered CREATE "+w+" attempt 1", 1)
	h.stdout.wait(t, "event ADDED "+w, 1)
	h.stdout.wait(t, "daemon started "+w, 1)
	waitWidget(t, dyn, ns, "w", "held for the handler", func(o *unstructured.Unstructured) bool {
		return o != nil && hold.Has(o, "py-kinds")
	})

	patchWidget(t, dyn, ns, "w", `{"spec":{"size":2}}`)
	h.stdout.wait(t, "delivered UPDATE "+w+" attempt 1", 1)
	h.stdout.wait(t, "changed spec.size", 1)
	h.stdout.wait(t, "delivered FIELD "+w+" attempt 1", 1)
	h.stdout.wait(t, "field spec.size of "+w+": 1 -> 2", 1)
	h.stdout.wait(t, "event MODIFIED "+w, 1)

	deleteWidget(t, dyn, ns, "w")
	h.stdout.wait(t, "daemon stopped "+w, 1)
	h.stdout.wait(t, "delivered DELETE "+w+" attempt 1", 1)
	waitWidget(t, dyn, ns, "w", "gone", func(o *unstructured.Unstructured) bool { return o == nil })
	h.stdout.wait(t, "event DELETED "+w, 1)
	if n := h.stdout.count("delivered RESUME " + w); n != 0 {
		t.Errorf("a widget this handler created was resumed %d times", n)
	}
}

// TestKilledHandlerResumesAndDeletesOnReturn: a handler killed with
// SIGKILL and started again within its grace resumes the widgets it had
// handled (their daemons start again, their creates are not repeated), and
// a widget deleted while it was away is still there, held, for its delete.
func TestKilledHandlerResumesAndDeletesOnReturn(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	const name = "py-return"
	args := []string{"--namespace", ns, "--every-kind", "--max-backoff", "1"}
	first := startHandler(t, b.addr, name, args...)
	first.stdout.wait(t, welcomed, 1)
	for _, w := range []string{"kept", "doomed"} {
		createWidget(t, dyn, ns, w, nil)
		first.stdout.wait(t, "daemon started "+ns+"/"+w, 1)
		waitWidget(t, dyn, ns, w, "created and held", func(o *unstructured.Unstructured) bool {
			return o != nil && o.GetLabels()[createdLabel] == "true" && hold.Has(o, name)
		})
	}

	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	first.waitExit(t, waitTimeout)
	b.log.wait(t, "handler instance disconnected", 1)
	deleteWidget(t, dyn, ns, "doomed")
	waitWidget(t, dyn, ns, "doomed", "Terminating with the hold", func(o *unstructured.Unstructured) bool {
		return o != nil && o.GetDeletionTimestamp() != nil && hold.Has(o, name)
	})

	second := startHandler(t, b.addr, name, args...)
	second.stdout.wait(t, welcomed, 1)
	second.stdout.wait(t, "delivered DELETE "+ns+"/doomed attempt 1", 1)
	waitWidget(t, dyn, ns, "doomed", "gone", func(o *unstructured.Unstructured) bool { return o == nil })
	second.stdout.wait(t, "delivered RESUME "+ns+"/kept attempt 1", 1)
	second.stdout.wait(t, "daemon started "+ns+"/kept", 1)
	if n := second.stdout.count("delivered CREATE " + ns + "/kept "); n != 0 {
		t.Errorf("the returning handler got kept's create %d times; it had been handled", n)
	}
}

func patchWidget(t *testing.T, dyn dynamic.Interface, ns, name, patch string) {
	t.Helper()
	if _, err := dyn.Resource(widgetGVR).Namespace(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching widget %s/%s with %s: %v", ns, name, patch, err)
	}
}
