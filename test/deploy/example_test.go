package deploy

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/test/controlplane"
)

// optIn opts the namespace target in to the example handler, with the
// command deploy/example-handler/rbac.yaml gives the admin.
func optIn(t *testing.T, cp *controlplane.ControlPlane, target string) {
	t.Helper()
	kubectl(t, cp, "-n", target, "create", "rolebinding", "tether-example-handler",
		"--clusterrole="+exampleObjectsRole, "--serviceaccount="+exampleNS+":"+handlerName)
}

// TestExampleHandlerOptIn: as the example handler's ServiceAccount,
// `kubectl auth can-i` answers no for Secrets in kube-system, in the
// broker's namespace and in a namespace that has not opted in, and yes in
// one that has, for what the replicator and the TTL reaper do there.
func TestExampleHandlerOptIn(t *testing.T) {
	cp, _ := applyManifests(t)
	optedIn, notOptedIn := cp.Namespace(t), cp.Namespace(t)
	optIn(t, cp, optedIn)
	as := "--as=system:serviceaccount:" + exampleNS + ":" + handlerName
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "secrets", "-n", "kube-system"}, "no"},
		{[]string{"get", "secrets", "-n", ns}, "no"},
		{[]string{"get", "secrets/tether-broker-grpc-tls-ca", "-n", ns}, "no"},
		{[]string{"get", "secrets", "-n", notOptedIn}, "no"},
		{[]string{"get", "secrets", "-n", exampleNS}, "no"},
		{[]string{"list", "secrets", "--all-namespaces"}, "no"},
		{[]string{"get", "secrets", "-n", optedIn}, "yes"},
		{[]string{"watch", "secrets", "-n", optedIn}, "yes"},
		{[]string{"create", "secrets", "-n", optedIn}, "yes"},
		{[]string{"delete", "secrets", "-n", optedIn}, "yes"},
		{[]string{"update", "configmaps", "-n", optedIn}, "yes"},
		{[]string{"update", "configmaps", "-n", notOptedIn}, "no"},
		{[]string{"create", "rolebindings", "-n", notOptedIn}, "no"},
	} {
		res := runKubectl(cp, repoRoot(t), append([]string{"auth", "can-i", as}, tc.args...)...)
		if got := strings.TrimSpace(res.stdout); got != tc.want {
			t.Errorf("kubectl auth can-i %s: %q, want %q\n%s", strings.Join(tc.args, " "), got, tc.want, res)
		}
	}
}

// TestBrokerFillsTheExampleHandlersCA: with a real token of tether-broker,
// the broker may fill the CA bundle deploy/example-handler ships empty in
// tether-example (RBAC, and the policy tether-broker-writes that keeps it
// from changing other objects' data), and may create or change no other
// ConfigMap there.
func TestBrokerFillsTheExampleHandlersCA(t *testing.T) {
	cp, _ := applyManifests(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kube, err := kubernetes.NewForConfig(asBroker(ctx, t, cp))
	if err != nil {
		t.Fatal(err)
	}
	cms := kube.CoreV1().ConfigMaps(exampleNS)
	cm, err := cms.Get(ctx, broker.DefaultCAConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the broker reads the shipped CA ConfigMap: %v", err)
	}
	cm.Data = map[string]string{broker.CAConfigMapKey: "a CA bundle"}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the broker fills the CA bundle in %s: %v", exampleNS, err)
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: exampleNS}}
	if _, err := cms.Create(ctx, other, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the broker creates a ConfigMap in %s: err = %v, want Forbidden", exampleNS, err)
	}
	if _, err := cp.Client().CoreV1().ConfigMaps(exampleNS).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cp.Client().CoreV1().ConfigMaps(exampleNS).Delete(context.Background(), "other", metav1.DeleteOptions{})
	}()
	other.Data = map[string]string{"k": "v"}
	if _, err := cms.Update(ctx, other, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the broker changes another ConfigMap in %s: err = %v, want Forbidden", exampleNS, err)
	}
}
