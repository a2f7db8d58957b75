package lifecycle

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/dispatch"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

func withAbsence(grace, absentAfter time.Duration) func(*broker.Options) {
	return func(o *broker.Options) {
		o.Absence = dispatch.AbsenceLimits{Grace: grace, AbsentReleaseAfter: absentAfter}
	}
}

func heldBy(handler string) func(*unstructured.Unstructured) bool {
	return func(o *unstructured.Unstructured) bool { return o != nil && hold.Has(o, handler) }
}

func createHeld(t *testing.T, cp *controlplane.ControlPlane, ns, handler string, names ...string) {
	t.Helper()
	dyn := cp.Dynamic(t)
	for _, n := range names {
		create(t, dyn, widgetGVR, widget(ns, n, map[string]any{"size": int64(1)}))
	}
	for _, n := range names {
		waitObject(t, dyn, widgetGVR, ns, n, "held by "+handler, heldBy(handler))
	}
}

func hasEvent(t *testing.T, cp *controlplane.ControlPlane, ns, name, reason, contains string) bool {
	for _, e := range events(t, cp, ns, name) {
		if e.Reason == reason && strings.Contains(e.Message, contains) {
			return true
		}
	}
	return false
}

// TestKilledHandlerReleasesDeletingObjectsAfterGrace: the handler process is
// SIGKILLed, then its held objects are deleted: all are gone within grace +
// 5 s with no manual patch, and an Event names rule 3c. A STRICT hold is
// exempt and stays.
func TestKilledHandlerReleasesDeletingObjectsAfterGrace(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, strictNS := cp.Namespace(t), cp.Namespace(t)
	const grace = 2 * time.Second
	addr := startBroker(t, cp, withAbsence(grace, time.Hour))
	h := startHandlerProcess(t, addr, "killed", ns)
	s := startHandlerProcess(t, addr, "strict", strictNS, "--strict")
	createHeld(t, cp, ns, "killed", "a", "b", "c")
	createHeld(t, cp, strictNS, "strict", "kept")

	start := time.Now() // the grace starts when the broker sees them go, just after this
	h.kill()
	s.kill()
	for _, n := range []string{"a", "b", "c"} {
		del(t, dyn, widgetGVR, ns, n)
	}
	del(t, dyn, widgetGVR, strictNS, "kept")
	for _, n := range []string{"a", "b", "c"} {
		waitObject(t, dyn, widgetGVR, ns, n, "released and gone", gone)
	}
	took := time.Since(start)
	t.Logf("held objects of a killed handler gone %v after the kill (grace %v)", took.Round(time.Millisecond), grace)
	if took > grace+5*time.Second {
		t.Errorf("took %v, want within grace + 5s", took)
	}
	if took < grace {
		t.Errorf("released after %v, before the grace of %v ran out", took, grace)
	}
	eventually(t, "an Event naming rule 3c", func() bool { return hasEvent(t, cp, ns, "a", "HoldReleased", "rule 3c") })
	if obj := get(t, dyn, widgetGVR, strictNS, "kept"); !hold.Has(obj, "strict") {
		t.Errorf("a STRICT hold was released while its handler was absent")
	}
}

// TestHandlerBackWithinGraceRunsTheDelete: a handler restarted within its
// grace (a rolling update) releases nothing early: the deletion waits, the
// delete handler runs on the new instance, then the hold goes.
func TestHandlerBackWithinGraceRunsTheDelete(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(time.Minute, time.Hour))
	first := startHandlerProcess(t, addr, "rolling", ns)
	createHeld(t, cp, ns, "rolling", "w")

	first.kill()
	del(t, dyn, widgetGVR, ns, "w")
	if obj := get(t, dyn, widgetGVR, ns, "w"); obj == nil || obj.GetDeletionTimestamp() == nil {
		t.Fatalf("the held widget should wait for its handler: %v", obj)
	}
	second := startHandlerProcess(t, addr, "rolling", ns)
	eventually(t, "the delete handler on the new instance", func() bool { return second.saw("DELETE " + ns + "/w") })
	waitObject(t, dyn, widgetGVR, ns, "w", "gone", gone)
	if first.saw("DELETE " + ns + "/w") {
		t.Error("the killed instance ran the delete")
	}
}

// TestGoodbyeStartsGraceAtOnce: a handler stopped with SIGTERM says
// Goodbye, so its grace starts then rather than when keepalive notices.
func TestGoodbyeStartsGraceAtOnce(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	const grace = time.Second
	addr := startBroker(t, cp, withAbsence(grace, time.Hour))
	h := startHandlerProcess(t, addr, "polite", ns)
	createHeld(t, cp, ns, "polite", "w")
	if err := h.terminate(); err != nil {
		t.Fatalf("the handler did not stop cleanly on SIGTERM: %v", err)
	}
	start := time.Now()
	del(t, dyn, widgetGVR, ns, "w")
	waitObject(t, dyn, widgetGVR, ns, "w", "released and gone", gone)
	if took := time.Since(start); took > grace+3*time.Second {
		t.Errorf("took %v after a graceful stop, want about the grace of %v", took, grace)
	}
}

// TestRestartedBrokerRemembersAbsentHandler: broker and handler are both
// killed; the held object is deleted while both are down; the restarted
// broker has never seen the handler connect, yet releases its hold after
// the grace, because the handler's Lease remembers it.
func TestRestartedBrokerRemembersAbsentHandler(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	addr := freeAddr(t)
	flags := []string{"--grace", "3s", "--absent-release-after", "1h"}
	b := startBrokerProcess(t, cp, addr, brokerNS, flags...)
	h := startHandlerProcess(t, addr, "remembered", ns)
	createHeld(t, cp, ns, "remembered", "w")

	h.kill()
	b.kill()
	del(t, dyn, widgetGVR, ns, "w")
	killed := time.Now()
	startBrokerProcess(t, cp, addr, brokerNS, flags...)
	waitObject(t, dyn, widgetGVR, ns, "w", "released by the restarted broker", gone)
	t.Logf("released %v after the handler was killed (grace 3s)", time.Since(killed).Round(time.Millisecond))
}

// TestLongAbsenceStripsHoldsAndReturnAddsThem: after absent_release_after
// the holds come off live objects too (rule 3d); when the handler returns
// they are added again.
func TestLongAbsenceStripsHoldsAndReturnAddsThem(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(500*time.Millisecond, 2*time.Second))
	h := startHandlerProcess(t, addr, "wanderer", ns)
	createHeld(t, cp, ns, "wanderer", "a", "b")

	h.kill()
	for _, n := range []string{"a", "b"} {
		waitObject(t, dyn, widgetGVR, ns, n, "hold stripped", func(o *unstructured.Unstructured) bool {
			return o != nil && !hold.Has(o, "wanderer")
		})
	}
	eventually(t, "an Event naming rule 3d", func() bool { return hasEvent(t, cp, ns, "a", "HoldReleased", "rule 3d") })
	startHandlerProcess(t, addr, "wanderer", ns)
	for _, n := range []string{"a", "b"} {
		waitObject(t, dyn, widgetGVR, ns, n, "held again", heldBy("wanderer"))
	}
}

// TestUninstallReleasesEveryHold follows `helm uninstall`: the broker's
// Deployment is deleted while objects still exist; the broker releases
// every hold and exits, leaving no tether.dev/ finalizer behind. Then
// `broker release --all` finds nothing left to do.
func TestUninstallReleasesEveryHold(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	testenv.CreateBrokerDeployment(t, cp.Client(), brokerNS, "tether-broker")
	addr := freeAddr(t)
	b := startBrokerProcess(t, cp, addr, brokerNS, "--deployment", "tether-broker")
	startHandlerProcess(t, addr, "one", ns)
	startHandlerProcess(t, addr, "two", ns)
	createHeld(t, cp, ns, "one", "a", "b")
	waitObject(t, dyn, widgetGVR, ns, "a", "held by two as well", heldBy("two"))

	if err := cp.Client().AppsV1().Deployments(brokerNS).Delete(context.Background(), "tether-broker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
	case <-time.After(waitTimeout):
		t.Fatal("the broker did not exit after its Deployment was deleted")
	}
	if code := b.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the broker exited with %d after uninstall, want 0", code)
	}
	for _, n := range []string{"a", "b"} {
		if obj := get(t, dyn, widgetGVR, ns, n); len(hold.Handlers(obj)) > 0 {
			t.Errorf("%s still carries holds %v after uninstall", n, obj.GetFinalizers())
		}
	}
	out, err := exec.Command(brokerBinary(t), "release", "--all", "--kubeconfig", cp.KubeconfigPath(), "--namespace", brokerNS).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "released 0 hold(s)") {
		t.Errorf("broker release --all after uninstall: %v\n%s", err, out)
	}
}

// TestReleaseCommandWithBrokerDown: `broker release --handler` strips one
// handler's holds with the broker stopped (no broker takes its request up),
// prints each object, deletes that handler's Lease, and leaves other
// handlers' holds and Leases and other controllers' finalizers alone.
func TestReleaseCommandWithBrokerDown(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	addr := freeAddr(t)
	b := startBrokerProcess(t, cp, addr, brokerNS)
	startHandlerProcess(t, addr, "gone", ns)
	startHandlerProcess(t, addr, "stays", ns)
	w := widget(ns, "w", map[string]any{"size": int64(1)})
	w.SetFinalizers([]string{"other.example.com/keep"})
	create(t, dyn, widgetGVR, w)
	waitObject(t, dyn, widgetGVR, ns, "w", "held by both", func(o *unstructured.Unstructured) bool {
		return heldBy("gone")(o) && heldBy("stays")(o)
	})
	b.kill()

	status, err := exec.Command(brokerBinary(t), "status", "--kubeconfig", cp.KubeconfigPath(), "--namespace", brokerNS).CombinedOutput()
	if err != nil {
		t.Fatalf("broker status: %v\n%s", err, status)
	}
	t.Logf("broker status:\n%s", status)
	for _, name := range []string{"gone", "stays"} {
		if !strings.Contains(string(status), name) {
			t.Errorf("broker status does not list handler %s", name)
		}
	}

	out, err := exec.Command(brokerBinary(t), "release", "--handler", "gone", "--kubeconfig", cp.KubeconfigPath(), "--namespace", brokerNS).CombinedOutput()
	if err != nil {
		t.Fatalf("broker release: %v\n%s", err, out)
	}
	for _, want := range []string{"no running broker took up 1 handler(s)", "released widgets " + ns + "/w from handler gone",
		"released 1 hold(s)", "lease " + presence.LeaseName("gone") + " deleted"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("broker release does not say %q:\n%s", want, out)
		}
	}
	obj := get(t, dyn, widgetGVR, ns, "w")
	if hold.Has(obj, "gone") || !hold.Has(obj, "stays") || !strings.Contains(strings.Join(obj.GetFinalizers(), ","), "other.example.com/keep") {
		t.Errorf("finalizers after release = %v", obj.GetFinalizers())
	}
	leases := cp.Client().CoordinationV1().Leases(brokerNS)
	if _, err := leases.Get(context.Background(), presence.LeaseName("gone"), metav1.GetOptions{}); !isNotFound(err) {
		t.Errorf("the released handler's lease: %v, want not found", err)
	}
	if _, err := leases.Get(context.Background(), presence.LeaseName("stays"), metav1.GetOptions{}); err != nil {
		t.Errorf("the other handler's lease: %v", err)
	}
}

// TestHandlerAsksForItsOwnGrace: a handler may ask for another grace in
// Hello, within the broker's limits, and it applies.
func TestHandlerAsksForItsOwnGrace(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp, withAbsence(time.Hour, 0))
	h := sdk.New("hasty", append(handlerOpts(t), sdk.WithGrace(time.Second))...)
	h.OnDelete(widgets, func(context.Context, *sdk.Event) error { return nil }, sdk.Namespaces(ns))
	stop := runHandler(t, h, addr)
	createHeld(t, cp, ns, "hasty", "w")
	stop()
	start := time.Now()
	del(t, dyn, widgetGVR, ns, "w")
	waitObject(t, dyn, widgetGVR, ns, "w", "released after the handler's own grace", gone)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v with a 1s grace asked for (broker default 1h)", took)
	}
}
