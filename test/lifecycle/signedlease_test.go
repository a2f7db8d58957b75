package lifecycle

import (
	"context"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/kube/kubetest"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// The tests in this file play the signature of presence Leases: a Lease
// the broker signed and someone else changed, and an unsigned one, as a
// broker that did not sign leaves them.

// TestARewrittenLeaseOfARealHandlerIsNotRestored: a real handler, granted
// its rights, holds a widget with a STRICT hold and stops. While the broker
// is down, a ServiceAccount that may only write Leases in the broker's
// namespace rewrites the handler's Lease, keeping the identity it records
// (which passes the rights check) but dropping its bindings and adding its
// widgets to the scopes to sweep. The restarted broker does not restore it:
// the signature does not match, a HandlerNotRestored Event says so, and the
// hold stays until the real handler, back, runs its delete.
func TestARewrittenLeaseOfARealHandlerIsNotRestored(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	r := startRestartable(t, cp)
	objects := cp.Namespace(t)
	var j journal
	realHandler := strictHeldThenStopped(t, cp, r, objects, &j)

	kube, _ := r.leaseWriter(t)
	store := &presence.Store{Client: kubetest.Wrap(kube), Namespace: r.ns}
	records, err := store.List(context.Background())
	if err != nil || len(records) != 1 || records[0].Handler != "real" {
		t.Fatalf("the Leases a Lease writer reads: %v, %v", records, err)
	}
	rec := records[0]
	if rec.User.Name != "system:serviceaccount:"+r.ns+":real" {
		t.Fatalf("the Lease records user %q, not the real handler's", rec.User.Name)
	}
	rec.Bindings = nil
	rec.Sweep = []presence.Scope{{Resource: widgetGVR, Namespaces: []string{objects}}}
	if err := store.Put(context.Background(), rec); err != nil {
		t.Fatalf("rewriting the real handler's Lease as a ServiceAccount that may write Leases: %v", err)
	}

	r.start(t)
	held := true
	testenv.Eventually(t, waitTimeout, "a HandlerNotRestored Event on the Lease, or the hold swept", func() bool {
		held = hold.Has(get(t, dyn, widgetGVR, objects, "w"), "real")
		return !held || hasEvent(t, cp, r.ns, presence.LeaseName("real"), "HandlerNotRestored", "signature does not match")
	})
	if !held {
		t.Fatal("the real handler's STRICT hold was swept on the say of a Lease rewritten by someone else")
	}

	// The real handler signs in again: its Lease is the broker's again, and
	// its delete runs.
	runHandler(t, realHandler(), r.addr)
	del(t, dyn, widgetGVR, objects, "w")
	j.waitCount(t, sdk.Delete, "w", 1)
	waitObject(t, dyn, widgetGVR, objects, "w", "released by the real handler's delete", gone)
}

// TestAnUnsignedLeaseIsRestoredOnUpgrade: a handler granted its rights
// holds a widget and stops; the broker stops, the signature is taken off
// its Lease (as a broker that did not sign wrote it), the widget is
// deleted, and the broker starts again, soon after its key was made. The
// identity the Lease records passes the rights check, so the handler is
// restored and its hold released after its grace.
func TestAnUnsignedLeaseIsRestoredOnUpgrade(t *testing.T) {
	cp := controlplane.Get(t)
	r := startRestartable(t, cp)
	objects := heldThenStopped(t, cp, r, "older")

	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{"tether.dev/signature": nil}}})
	if err != nil {
		t.Fatal(err)
	}
	leases := cp.Client().CoordinationV1().Leases(r.ns)
	l, err := leases.Patch(context.Background(), presence.LeaseName("older"), types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, signed := l.Annotations["tether.dev/signature"]; signed {
		t.Fatal("the Lease is still signed")
	}
	releasedAfterRestart(t, cp, r, objects, "older")
	eventually(t, "the restored handler's Lease signed again", func() bool {
		l, err := leases.Get(context.Background(), presence.LeaseName("older"), metav1.GetOptions{})
		return err == nil && l.Annotations["tether.dev/signature"] != ""
	})
}
