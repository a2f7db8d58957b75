package lifecycle

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// The tests in this file play the ways an uninstall goes that once left
// holds behind.

// TestReleaseGoesOnPastAFailingResource: `broker release --all` meets a
// resource it cannot list (here one that has no list verb at all). It
// releases every other hold, names what failed and exits non-zero.
func TestReleaseGoesOnPastAFailingResource(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	addr := freeAddr(t)
	b := startBrokerProcess(t, cp, addr, brokerNS)
	startHandlerProcess(t, addr, "zz-real", ns)
	createHeld(t, cp, ns, "zz-real", "w")
	b.kill()
	createLease(t, cp, brokerNS, "aa-odd", map[string]string{"tether.dev/grace": "1s", "tether.dev/absent-release-after": "0s",
		"tether.dev/resources": "tokenreviews.v1.authentication.k8s.io"})

	out, err := exec.Command(brokerBinary(t), "release", "--all", "--kubeconfig", cp.KubeconfigPath(), "--namespace", brokerNS).CombinedOutput()
	if err == nil {
		t.Errorf("broker release succeeded though a resource failed:\n%s", out)
	}
	if !strings.Contains(string(out), "tokenreviews") {
		t.Errorf("broker release does not name the failing resource:\n%s", out)
	}
	if obj := get(t, dyn, widgetGVR, ns, "w"); hold.Has(obj, "zz-real") {
		t.Errorf("the other handler's hold stayed:\n%s", out)
	}
}

// TestUninstallWithoutLeases: the handlers' Leases are gone before the
// Deployment (`kubectl delete namespace` deletes both, in any order). The
// broker still knows its handlers and releases every hold.
func TestUninstallWithoutLeases(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	testenv.CreateBrokerDeployment(t, cp.Client(), brokerNS, "tether-broker")
	addr := freeAddr(t)
	b := startBrokerProcess(t, cp, addr, brokerNS, "--deployment", "tether-broker")
	startHandlerProcess(t, addr, "forgotten", ns)
	createHeld(t, cp, ns, "forgotten", "w")

	ctx := context.Background()
	if err := cp.Client().CoordinationV1().Leases(brokerNS).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: presence.LabelHandler}); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client().AppsV1().Deployments(brokerNS).Delete(ctx, "tether-broker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
	case <-time.After(waitTimeout):
		t.Fatal("the broker did not exit after its Deployment was deleted")
	}
	if obj := get(t, dyn, widgetGVR, ns, "w"); hold.Has(obj, "forgotten") {
		t.Errorf("the hold stayed after uninstall: %v", obj.GetFinalizers())
	}
}

// TestUninstallWithLeaderElection: the leader uninstalls and exits; the
// follower, which takes over once the Deployment is already gone, must
// finish the uninstall and exit rather than dispatch and add the holds
// back.
func TestUninstallWithLeaderElection(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	testenv.CreateBrokerDeployment(t, cp.Client(), brokerNS, "tether-broker")
	election := []string{"--deployment", "tether-broker", "--leader-elect", "--leader-elect-lease-duration", "3s",
		"--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "250ms"}
	addrs := []string{freeAddr(t), freeAddr(t)}
	var brokers []*brokerProcess
	for i, id := range []string{"replica-a", "replica-b"} {
		brokers = append(brokers, startBrokerProcess(t, cp, addrs[i], brokerNS, append([]string{"--identity", id}, election...)...))
	}
	h := sdk.New("elected", append(handlerOpts(t), sdk.WithDialer(sdk.RoundRobin(addrs...)))...)
	h.OnDelete(widgets, func(context.Context, *sdk.Event) error { return nil }, sdk.Namespaces(ns))
	runHandler(t, h, addrs[0])
	createHeld(t, cp, ns, "elected", "w")

	if err := cp.Client().AppsV1().Deployments(brokerNS).Delete(context.Background(), "tether-broker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, b := range brokers {
		select {
		case <-b.done:
		case <-time.After(2 * waitTimeout):
			t.Fatalf("broker %d did not exit after the uninstall", i)
		}
	}
	if obj := get(t, dyn, widgetGVR, ns, "w"); hold.Has(obj, "elected") {
		t.Errorf("the hold is back after the uninstall: %v", obj.GetFinalizers())
	}
}
