package lifecycle

import (
	"net"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// freeAddr picks a free loopback port for a broker that must come back on
// the same address after a restart.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestBrokerKilledMidStreamLosesNothing kills the broker process with
// SIGKILL while a handler is connected, changes objects while it is down,
// and starts it again: no finished create runs again, the update made while
// it was down carries the right old side, and an object created while it
// was down is created.
func TestBrokerKilledMidStreamLosesNothing(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr, brokerNS := freeAddr(t), cp.Namespace(t)
	first := startBrokerProcess(t, cp, addr, brokerNS)

	var j journal
	h := sdk.New("survivor", handlerOpts(t)...)
	h.OnCreate(widgets, j.record(nil), sdk.Namespaces(ns))
	h.OnUpdate(widgets, j.record(nil), sdk.Namespaces(ns))
	runHandler(t, h, addr)

	for _, name := range []string{"a", "b"} {
		create(t, dyn, widgetGVR, widget(ns, name, map[string]any{"size": int64(1)}))
		j.waitCount(t, sdk.Create, name, 1)
		waitObject(t, dyn, widgetGVR, ns, name, "create recorded", func(o *unstructured.Unstructured) bool {
			return o != nil && len(o.GetAnnotations()) > 0
		})
	}

	first.kill()
	setSpec(t, cp, ns, "a", map[string]any{"size": int64(7)})
	create(t, dyn, widgetGVR, widget(ns, "c", map[string]any{"size": int64(1)}))

	startBrokerProcess(t, cp, addr, brokerNS)
	up := j.waitCount(t, sdk.Update, "a", 1)[0]
	if got, _, _ := unstructured.NestedInt64(up.Old().Object, "spec", "size"); got != 1 {
		t.Errorf("update after restart: old spec.size = %d, want 1", got)
	}
	if got, _, _ := unstructured.NestedInt64(up.Object().Object, "spec", "size"); got != 7 {
		t.Errorf("update after restart: new spec.size = %d, want 7", got)
	}
	j.waitCount(t, sdk.Create, "c", 1)
	waitObject(t, dyn, widgetGVR, ns, "c", "create recorded", func(o *unstructured.Unstructured) bool {
		return o != nil && len(o.GetAnnotations()) > 0
	})
	for _, name := range []string{"a", "b"} {
		if n := len(j.find(sdk.Create, name)); n != 1 {
			t.Errorf("create of %s ran %d times across the restart, want once", name, n)
		}
	}
	if n := len(j.find(sdk.Update, "b")); n != 0 {
		t.Errorf("unchanged b got %d updates", n)
	}
}
