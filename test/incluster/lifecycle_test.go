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
	_, err := c.Client().CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{example.AnnEnabled: "true", example.AnnInclude: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the hold on "+ns+"/"+name, func(ctx context.Context) error {
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
// example handler holds a Secret, which is deleted too: `kubectl delete -k
// deploy/` (the broker's ClusterRole and binding go at once; its own copy
// of them stays), and deleting the namespace tether-system with everything
// in it (the namespace controller deletes the broker's ServiceAccount, Role
// and RoleBinding in an order of its own; the uninstall guard keeps them).
// Within the bound, no object carries a tether.dev/ finalizer, both
// namespaces are gone, the Secret's deletion completed, and no grant of the
// broker is left.
func TestUninstallLeavesNothingHeld(t *testing.T) {
	c := node.Get(t)
	for _, way := range []struct {
		name      string
		uninstall []string // kubectl's arguments
	}{
		{"kubectl delete -k deploy", []string{"delete", "-k", deployDir(t), "--wait=false"}},
		{"namespace deleted", []string{"delete", "namespace", tetherNS, "--wait=false"}},
	} {
		t.Run(way.name, func(t *testing.T) {
			install(t, c)
			followBrokerLogs(t, c)
			ns := heldSecret(t, c, "held")
			begin := time.Now()
			kubectl(t, c, way.uninstall...)
			if err := c.Client().CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, uninstallBound, "nothing held and every namespace gone", func(ctx context.Context) error {
				return nothingLeft(ctx, c.Client(), tetherNS, ns)
			})
			t.Logf("%s: the last object gone %s after", way.name, time.Since(begin).Round(100*time.Millisecond))
		})
	}
}

// uninstallBound is how long an uninstall may take to let everything go:
// the broker's termination grace (120s in deploy/) bounds its release.
const uninstallBound = 2 * time.Minute

// nothingLeft is nil when the namespaces are gone, no Secret or ConfigMap
// anywhere carries a tether.dev/ finalizer, the broker's grant is gone (the
// garbage collector removes it with the namespace) and no webhook
// configuration of the broker is left to refuse writes.
func nothingLeft(ctx context.Context, kube kubernetes.Interface, namespaces ...string) error {
	for _, ns := range namespaces {
		n, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("namespace %s is %s (%v)", ns, n.Status.Phase, n.Status.Conditions)
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
	}
	secrets, err := kube.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	configMaps, err := kube.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var metas []metav1.ObjectMeta
	for _, s := range secrets.Items {
		metas = append(metas, s.ObjectMeta)
	}
	for _, cm := range configMaps.Items {
		metas = append(metas, cm.ObjectMeta)
	}
	for _, m := range metas {
		for _, f := range m.Finalizers {
			if strings.HasPrefix(f, "tether.dev/") {
				return fmt.Errorf("%s/%s still carries %s", m.Namespace, m.Name, f)
			}
		}
	}
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
