package incluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/test/node"
	"github.com/tether-dev/tether/test/testenv"
)

// brokerChart is the broker's chart, relative to the repository root.
const brokerChart = "deploy/helm/tether"

// installChart installs the broker with its chart, as the release "tether"
// in tether-system, once whatever install an earlier test left is gone, and
// the example handler beside it with kubectl; it waits for one Ready leader
// and a Ready handler.
func installChart(t *testing.T, c *node.Cluster) {
	t.Helper()
	uninstalled(t, c)
	begin := time.Now()
	helm(t, c, "install", "tether", brokerChart, "--namespace", tetherNS, "--create-namespace")
	kubectl(t, c, "apply", "-k", filepath.Join(deployDir(t), "example-handler"))
	testenv.WaitFor(t, 3*time.Minute, "one Ready broker leader and a Ready example handler", func(ctx context.Context) error {
		if _, err := readyLeader(ctx, c.Client()); err != nil {
			return err
		}
		return deploymentReady(ctx, c.Client(), exampleNS, "example-handler")
	})
	t.Logf("helm install of the broker's chart to a Ready leader and handler: %s", time.Since(begin).Round(100*time.Millisecond))
}

// TestHelmUninstallOfAnOperatorLeavesNothing is the seed's story: an
// operator installed with Helm, its chart holding a CRD, one object of it
// and the handler whose timer holds that object. `helm uninstall` deletes
// the object and the handler at once (Helm keeps the CRD of a chart's
// crds/), and the user deletes the CRD and the namespace. The broker
// releases the hold (the handler acknowledged the timer's stop, or it has
// been gone for its grace), so the object's deletion completes, then the
// CRD's and the namespace's. Kopf's operator leaves its finalizer there and
// all three hang.
func TestHelmUninstallOfAnOperatorLeavesNothing(t *testing.T) {
	c := node.Get(t)
	installChart(t, c)
	followBrokerLogs(t, c)
	installGadgets(t, c, gadgetsNS)

	dyn := c.Dynamic(t)
	begin := time.Now()
	helm(t, c, "uninstall", "gadgets", "--namespace", gadgetsNS)
	kubectl(t, c, "delete", "crd", gadgetsCRD, "--wait=false")
	kubectl(t, c, "delete", "namespace", gadgetsNS, "--wait=false")
	testenv.WaitFor(t, grace+uninstallBound, "the Gadget, its CRD and the namespace gone", func(ctx context.Context) error {
		if err := namespacesGone(ctx, c.Client(), gadgetsNS); err != nil {
			return err
		}
		return gadgetsLeft(ctx, dyn)
	})
	t.Logf("helm uninstall gadgets: the Gadget, its CRD and the namespace gone %s after", time.Since(begin).Round(100*time.Millisecond))
	// The broker stays, and still leads: the operator's uninstall was not its own.
	if _, err := readyLeader(context.Background(), c.Client()); err != nil {
		t.Errorf("after the operator's uninstall: %v", err)
	}
}

// TestHelmUninstallOfTheBrokerLeavesNothingHeld: `helm uninstall` of the
// broker's chart, while the example handler holds a Secret and the seed's
// operator holds a Gadget, releases both holds and removes the broker's
// grant and webhook configurations, though the namespace stays (Helm does
// not delete it). The objects then delete at once, and so do the
// namespaces.
func TestHelmUninstallOfTheBrokerLeavesNothingHeld(t *testing.T) {
	c := node.Get(t)
	installChart(t, c)
	followBrokerLogs(t, c)
	ns := heldSecret(t, c, "held")
	installGadgets(t, c, gadgetsNS)

	begin := time.Now()
	helm(t, c, "uninstall", "tether", "--namespace", tetherNS)
	dyn := c.Dynamic(t)
	testenv.WaitFor(t, uninstallBound, "every hold released and the broker's grant and webhooks gone", func(ctx context.Context) error {
		if err := holdsLeft(ctx, c.Client(), dyn); err != nil {
			return err
		}
		if err := brokerLeftovers(ctx, c.Client()); err != nil {
			return err
		}
		pods, err := c.Client().CoreV1().Pods(tetherNS).List(ctx, metav1.ListOptions{LabelSelector: brokerLabel})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d broker Pods are left", len(pods.Items))
		}
		return nil
	})
	t.Logf("helm uninstall tether: every hold released and the broker gone %s after", time.Since(begin).Round(100*time.Millisecond))
	g, err := dyn.Resource(gadgetsGVR).Namespace(gadgetsNS).Get(context.Background(), gadgetName, metav1.GetOptions{})
	if err != nil || slices.Contains(g.GetFinalizers(), gadgetsHold) {
		t.Fatalf("the Gadget after the broker's uninstall: %v, %v", g, err)
	}

	begin = time.Now()
	helm(t, c, "uninstall", "gadgets", "--namespace", gadgetsNS)
	kubectl(t, c, "delete", "crd", gadgetsCRD, "--wait=false")
	kubectl(t, c, "delete", "namespace", ns, gadgetsNS, tetherNS, "--wait=false")
	testenv.WaitFor(t, uninstallBound, "every namespace and the CRD gone", func(ctx context.Context) error {
		return nothingLeft(ctx, c.Client(), dyn, tetherNS, ns, gadgetsNS)
	})
	t.Logf("then the namespaces and the operator deleted: the last object gone %s after", time.Since(begin).Round(100*time.Millisecond))
}
