package lifecycle

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// The tests in this file play what a restarted broker finds in the Leases
// it restores from: one it cannot read, a binding that no longer compiles,
// a Lease someone deleted.

// TestRestoreSurvivesAnUndecodableLease: one handler's Lease is garbage.
// The other handlers are still restored (a held object deleted while all
// were down is released after the grace), and `broker status` still
// answers, naming the unreadable Lease.
func TestRestoreSurvivesAnUndecodableLease(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	addr := freeAddr(t)
	flags := []string{"--grace", "2s", "--absent-release-after", "1h"}
	b := startBrokerProcess(t, cp, addr, brokerNS, flags...)
	h := startHandlerProcess(t, addr, "sound", ns)
	createHeld(t, cp, ns, "sound", "w")
	createLease(t, cp, brokerNS, "junk", map[string]string{"tether.dev/bindings": "{not json", "tether.dev/grace": "soon"})

	h.kill()
	b.kill()
	del(t, dyn, widgetGVR, ns, "w")
	startBrokerProcess(t, cp, addr, brokerNS, flags...)
	waitObject(t, dyn, widgetGVR, ns, "w", "released by the restarted broker", gone)

	out, err := exec.Command(brokerBinary(t), "status", "--kubeconfig", cp.KubeconfigPath(), "--namespace", brokerNS).CombinedOutput()
	if err != nil {
		t.Fatalf("broker status with an unreadable Lease: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "sound") || !strings.Contains(string(out), "unreadable lease") {
		t.Errorf("broker status does not list both handlers:\n%s", out)
	}
}

// TestRestoreWithoutABindingThatNoLongerCompiles: while broker and handler
// are down, one of the handler's bindings stops resolving (its CRD is
// gone). The restarted broker restores the handler without that binding,
// so the held object deleted meanwhile is still released after the grace.
func TestRestoreWithoutABindingThatNoLongerCompiles(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	addr := freeAddr(t)
	flags := []string{"--grace", "2s", "--absent-release-after", "1h"}
	b := startBrokerProcess(t, cp, addr, brokerNS, flags...)
	h := startHandlerProcess(t, addr, "partial", ns)
	createHeld(t, cp, ns, "partial", "w")
	h.kill()
	b.kill()

	// Stand in for a CRD removed while the broker was down: the Lease now
	// also records a binding on a resource the API server does not serve.
	leases := cp.Client().CoordinationV1().Leases(brokerNS)
	l, err := leases.Get(context.Background(), presence.LeaseName("partial"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var bindings []json.RawMessage
	if err := json.Unmarshal([]byte(l.Annotations["tether.dev/bindings"]), &bindings); err != nil {
		t.Fatal(err)
	}
	bindings = append(bindings, json.RawMessage(`{"id":"gone","kind":"BINDING_KIND_DELETE","resource":{"group":"nowhere.tether.dev","version":"v1","resource":"gizmos"}}`))
	raw, err := json.Marshal(bindings)
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations["tether.dev/bindings"] = string(raw)
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	del(t, dyn, widgetGVR, ns, "w")
	startBrokerProcess(t, cp, addr, brokerNS, flags...)
	waitObject(t, dyn, widgetGVR, ns, "w", "released by the restarted broker", gone)
}

// TestDeletedLeaseIsWrittenAgain: a handler's Lease deleted while the
// handler is away comes back, so that the next broker still knows the
// handler and its holds.
func TestDeletedLeaseIsWrittenAgain(t *testing.T) {
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(time.Hour, 0), func(o *broker.Options) { o.Namespace = brokerNS })
	h := startHandlerProcess(t, addr, "erased", ns)
	createHeld(t, cp, ns, "erased", "w")
	h.kill()

	leases := cp.Client().CoordinationV1().Leases(brokerNS)
	name := presence.LeaseName("erased")
	testenv.Eventually(t, waitTimeout, "the Lease to record the handler's absence", func() bool {
		l, err := leases.Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && l.Annotations["tether.dev/instances"] == "0"
	})
	if err := leases.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// It is written again within one renewal period (10 s at most).
	testenv.Eventually(t, waitTimeout, "the Lease written again", func() bool {
		_, err := leases.Get(context.Background(), name, metav1.GetOptions{})
		return err == nil
	})
}

// createLease writes a handler's presence Lease by hand, with the given
// annotations, as a broker of another version or a person might have.
func createLease(t *testing.T, cp *controlplane.ControlPlane, ns, handler string, annotations map[string]string) {
	t.Helper()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: presence.LeaseName(handler), Namespace: ns,
		Labels: map[string]string{presence.LabelHandler: handler}, Annotations: annotations,
	}}
	if _, err := cp.Client().CoordinationV1().Leases(ns).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the Lease of %s: %v", handler, err)
	}
}
