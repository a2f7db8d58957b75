package incluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/broker/guard"
	"github.com/tether-dev/tether/test/example"
	"github.com/tether-dev/tether/test/node"
	"github.com/tether-dev/tether/test/testenv"
)

// heldSecret creates a Secret the example handler replicates and holds, in
// a namespace of its own, and waits for the hold.
func heldSecret(t *testing.T, c *node.Cluster, name string) string {
	t.Helper()
	ns := namespace(t, c, "held")
	optIn(t, c, ns)
	_, err := c.Client().CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{example.AnnEnabled: "true", example.AnnInclude: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, optInBound, "the hold on "+ns+"/"+name, func(ctx context.Context) error {
		return holds(ctx, c.Client(), ns, name)
	})
	return ns
}

// holds is nil when ns/name carries the example handler's hold.
func holds(ctx context.Context, kube kubernetes.Interface, ns, name string) error {
	s, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !slices.Contains(s.Finalizers, exampleHold) {
		return fmt.Errorf("%s/%s: finalizers %v, want %s", ns, name, s.Finalizers, exampleHold)
	}
	return nil
}

// watchHold fails the test if ns/name loses its hold before stop is
// called: a failover or a rollout must release nothing.
func watchHold(t *testing.T, c *node.Cluster, ns, name string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				done <- nil
				return
			case <-tick.C:
			}
			err := holds(ctx, c.Client(), ns, name)
			if err != nil && ctx.Err() == nil && !strings.Contains(err.Error(), "connection refused") {
				done <- err
				return
			}
		}
	}()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the hold was released: %v", err)
		}
	}
}

// TestLeaderPodDeletedOtherTakesOver: deleting the leader's Pod (a drain, a
// node going away gracefully) hands leadership to the other replica; the
// handler reconnects through the Service and works again; no hold is
// released in between.
func TestLeaderPodDeletedOtherTakesOver(t *testing.T) {
	c := node.Get(t)
	leader, _ := install(t, c)
	ns := heldSecret(t, c, "kept")
	stop := watchHold(t, c, ns, "kept")

	begin := time.Now()
	if err := c.Client().CoreV1().Pods(tetherNS).Delete(context.Background(), leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var next string
	testenv.WaitFor(t, 2*time.Minute, "another Ready leader", func(ctx context.Context) error {
		l, err := readyLeader(ctx, c.Client())
		if err == nil && l == leader {
			return fmt.Errorf("%s still leads", leader)
		}
		next = l
		return err
	})
	tookOver := time.Since(begin)
	// A Secret created after the takeover is replicated: the handler is back.
	_, err := c.Client().CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "after", Annotations: map[string]string{example.AnnEnabled: "true", example.AnnInclude: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the handler to hold a new Secret", func(ctx context.Context) error {
		return holds(ctx, c.Client(), ns, "after")
	})
	stop()
	t.Logf("leader %s deleted: %s leads and is Ready after %s; the handler held a new Secret %s after the delete",
		leader, next, tookOver.Round(100*time.Millisecond), time.Since(begin).Round(100*time.Millisecond))
}

// TestRollingUpdateReleasesNothing: a rollout of the broker (new Pods one
// by one, the old ones stopped) keeps every hold.
func TestRollingUpdateReleasesNothing(t *testing.T) {
	c := node.Get(t)
	install(t, c)
	ns := heldSecret(t, c, "kept")
	stop := watchHold(t, c, ns, "kept")
	begin := time.Now()
	kubectl(t, c, "-n", tetherNS, "rollout", "restart", "deployment/tether-broker")
	kubectl(t, c, "-n", tetherNS, "rollout", "status", "deployment/tether-broker", "--timeout=5m")
	testenv.WaitFor(t, 2*time.Minute, "a Ready leader after the rollout", func(ctx context.Context) error {
		_, err := readyLeader(ctx, c.Client())
		return err
	})
	stop()
	t.Logf("rollout done and a leader Ready in %s", time.Since(begin).Round(100*time.Millisecond))
}

// TestUninstallLeavesNothingHeld plays the seed's uninstall while the
// example handler holds a Secret and the seed's operator (testdata/gadgets)
// holds a Gadget with its timer; both objects are deleted too, and the CRD
// of Gadgets after them. Three ways: `kubectl delete -k deploy/` (the
// broker's ClusterRole and binding go at once; its own copy of them stays);
// deleting the namespaces tether-system and tether-example with everything
// in them (the namespace controller deletes the broker's ServiceAccount,
// Role and RoleBinding in an order of its own; the uninstall guard keeps
// them); and the handler's
// namespace deleted first, with its Gadget, before `kubectl delete -k
// deploy/`. Within the bound, no object carries a tether.dev/ finalizer,
// every namespace and the CRD are gone (so every deletion completed), and
// no grant or webhook configuration of the broker is left.
func TestUninstallLeavesNothingHeld(t *testing.T) {
	c := node.Get(t)
	deleteK := []string{"delete", "-k", deployDir(t), "--wait=false"}
	for _, way := range []struct {
		name         string
		handlerFirst bool     // the gadgets handler's namespace deleted, and gone, before the uninstall
		uninstall    []string // kubectl's arguments
	}{
		{name: "kubectl delete -k deploy", uninstall: deleteK},
		{name: "namespaces deleted", uninstall: []string{"delete", "namespace", tetherNS, exampleNS, "--wait=false"}},
		{name: "handler's namespace deleted first", handlerFirst: true, uninstall: deleteK},
	} {
		t.Run(way.name, func(t *testing.T) {
			install(t, c)
			followBrokerLogs(t, c)
			ns := heldSecret(t, c, "held")
			installGadgets(t, c, gadgetsNS)
			begin := time.Now()
			if way.handlerFirst {
				kubectl(t, c, "delete", "namespace", gadgetsNS, "--wait=false")
				testenv.WaitFor(t, grace+uninstallBound, "the handler's namespace gone", func(ctx context.Context) error {
					return namespacesGone(ctx, c.Client(), gadgetsNS)
				})
				t.Logf("%s: the handler's namespace, with its held Gadget, gone %s after", way.name, time.Since(begin).Round(100*time.Millisecond))
				begin = time.Now()
			}
			kubectl(t, c, way.uninstall...)
			kubectl(t, c, "delete", "namespace", ns, gadgetsNS, "--ignore-not-found", "--wait=false")
			kubectl(t, c, "delete", "crd", gadgetsCRD, "--wait=false")
			dyn := c.Dynamic(t)
			testenv.WaitFor(t, uninstallBound, "nothing held and every namespace gone", func(ctx context.Context) error {
				return nothingLeft(ctx, c.Client(), dyn, tetherNS, exampleNS, ns, gadgetsNS)
			})
			t.Logf("%s: the last object gone %s after", way.name, time.Since(begin).Round(100*time.Millisecond))
		})
	}
}

const (
	// uninstallBound is how long an uninstall may take to let everything
	// go: the broker's termination grace (120s in deploy/) bounds its
	// release.
	uninstallBound = 2 * time.Minute
	// grace is the broker's default grace: how long a handler may be away
	// before the objects being deleted that it holds are released.
	grace = 30 * time.Second
	// gadgetsNS is where the tests install the seed's operator.
	gadgetsNS = "gadgets"
)

// uninstalled removes whatever install of the broker an earlier test left,
// as `kubectl delete -k deploy/` (which removes a Helm release's objects
// too: they have the same names, and the release's record is in the
// namespace), and waits until nothing is left.
func uninstalled(t *testing.T, c *node.Cluster) {
	t.Helper()
	kubectl(t, c, "delete", "-k", deployDir(t), "--ignore-not-found", "--wait=false")
	dyn := c.Dynamic(t)
	testenv.WaitFor(t, uninstallBound, "an earlier install gone", func(ctx context.Context) error {
		return nothingLeft(ctx, c.Client(), dyn, tetherNS, exampleNS)
	})
}

// nothingLeft is nil when the namespaces are gone, no object carries a
// tether.dev/ finalizer, the CRD of Gadgets is gone (and so every Gadget),
// the broker's grant is gone (the garbage collector removes it with the
// namespace) and no webhook configuration of the broker is left to refuse
// writes.
func nothingLeft(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, namespaces ...string) error {
	if err := namespacesGone(ctx, kube, namespaces...); err != nil {
		return err
	}
	if err := holdsLeft(ctx, kube, dyn); err != nil {
		return err
	}
	if err := gadgetsLeft(ctx, dyn); err != nil {
		return err
	}
	return brokerLeftovers(ctx, kube)
}

// namespacesGone is nil when none of the namespaces exists.
func namespacesGone(ctx context.Context, kube kubernetes.Interface, namespaces ...string) error {
	for _, ns := range namespaces {
		n, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("namespace %s is %s (%v)", ns, n.Status.Phase, n.Status.Conditions)
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// holdsLeft is nil when no Secret, ConfigMap or Gadget anywhere carries a
// tether.dev/ finalizer.
func holdsLeft(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) error {
	secrets, err := kube.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	configMaps, err := kube.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var metas []metav1.Object
	for i := range secrets.Items {
		metas = append(metas, &secrets.Items[i])
	}
	for i := range configMaps.Items {
		metas = append(metas, &configMaps.Items[i])
	}
	gadgets, err := dyn.Resource(gadgetsGVR).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil {
		for i := range gadgets.Items {
			metas = append(metas, &gadgets.Items[i])
		}
	}
	for _, m := range metas {
		for _, f := range m.GetFinalizers() {
			if strings.HasPrefix(f, "tether.dev/") {
				return fmt.Errorf("%s/%s still carries %s", m.GetNamespace(), m.GetName(), f)
			}
		}
	}
	return nil
}

// brokerLeftovers is nil when the broker's grant and every webhook
// configuration it wrote are gone.
func brokerLeftovers(ctx context.Context, kube kubernetes.Interface) error {
	if _, err := kube.RbacV1().ClusterRoles().Get(ctx, guard.GrantName(tetherNS), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return fmt.Errorf("the broker's grant %s is left (%v)", guard.GrantName(tetherNS), err)
	}
	validating, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, w := range validating.Items {
		if strings.HasPrefix(w.Name, "tether-") {
			return fmt.Errorf("the webhook configuration %s is left", w.Name)
		}
	}
	mutating, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, w := range mutating.Items {
		if strings.HasPrefix(w.Name, "tether-") {
			return fmt.Errorf("the webhook configuration %s is left", w.Name)
		}
	}
	return nil
}
