package admission

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/example"
	"github.com/tether-dev/tether/test/gobin"
	"github.com/tether-dev/tether/test/testenv"
)

// TestAFailClosedWebhookOnEveryNamespaceDoesNotLockOutTheSystem: a handler
// validates ConfigMaps in every namespace, failing closed, and the broker
// process is killed. The webhook configuration stays, and the API server
// cannot reach the broker: a write in an ordinary namespace is refused, but
// kube-system, kube-node-lease and the broker's own namespace, which no
// webhook intercepts, still accept theirs, and so does the ordinary
// namespace for the system's own identities (a node, kube-controller-manager,
// a controller of kube-system such as the namespace controller emptying a
// namespace being deleted), which no webhook intercepts anywhere: that is
// what keeps cluster-scoped objects and deletions from being locked out too.
// Before the kill, a handler whose validate binding names kube-system is
// refused at Hello.
func TestAFailClosedWebhookOnEveryNamespaceDoesNotLockOutTheSystem(t *testing.T) {
	const name = "lockout"
	cp := controlplane.Get(t)
	brokerNS, ns := cp.Namespace(t), cp.Namespace(t)
	b := startBrokerProcess(t, cp, brokerNS)
	kube := kubernetes.NewForConfigOrDie(asTester(cp.RESTConfig()))
	probe := fmt.Sprintf("%s-%s", name, brokerNS) // unique in the shared system namespaces
	t.Cleanup(func() {
		// A fail-closed webhook on every ConfigMap must not outlive the
		// test: the other tests share the API server.
		ctx := context.Background()
		err := cp.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "tether-"+name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting the webhook configuration: %v", err)
		}
		for _, sys := range []string{"kube-system", "kube-node-lease"} {
			err := cp.Client().CoreV1().ConfigMaps(sys).Delete(ctx, probe, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting ConfigMap %s/%s: %v", sys, probe, err)
			}
		}
	})
	system := systemIdentities(t, cp, ns)
	runEveryConfigMapValidator(t, name, b.addr)
	create := func(ns, name string) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		_, err := kube.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{})
		return err
	}
	eventually(t, "the handler's webhook to be enforced", func() bool {
		err := create(ns, fmt.Sprintf("refused-%d", probes.Add(1)))
		return err != nil && strings.Contains(err.Error(), refusedMessage)
	})

	// A binding that names an excluded namespace is told so at Hello rather
	// than left with a webhook that never fires there.
	h := sdk.New(name+"-system", sdk.WithInsecure(), sdk.WithLogger(hclog.New(&hclog.LoggerOptions{Output: testenv.LogWriter(t, "")})))
	h.OnValidate(sdk.GVR("", "v1", "configmaps"), func(context.Context, *sdk.Review) error { return nil }, sdk.Namespaces("kube-system"))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var rejected *sdk.RejectedError
	if err := h.Run(ctx, b.addr); !errors.As(err, &rejected) || !strings.Contains(rejected.Message, `namespaces: "kube-system"`) {
		t.Fatalf("a validate binding in kube-system: want the broker's refusal naming the namespace, got %v", err)
	}

	b.proc.Kill()
	cfg, err := cp.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "tether-"+name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the webhook configuration is gone with the broker: %v", err)
	}
	if len(cfg.Webhooks) != 1 || *cfg.Webhooks[0].FailurePolicy != admissionregistrationv1.Fail {
		t.Fatalf("want one webhook failing closed, got %+v", cfg.Webhooks)
	}
	t.Logf("the webhook's namespaceSelector: %v", metav1.FormatLabelSelector(cfg.Webhooks[0].NamespaceSelector))
	if err := create(ns, "after-kill"); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("with the broker killed, a ConfigMap in an ordinary namespace: want the API server's refusal, got %v", err)
	}
	for _, sys := range []string{"kube-system", "kube-node-lease", brokerNS} {
		if err := create(sys, probe); err != nil {
			t.Errorf("with the broker killed, a ConfigMap in %s is refused: %v", sys, err)
		}
	}
	for _, who := range system {
		as := kubernetes.NewForConfigOrDie(impersonating(cp.RESTConfig(), who))
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "refused-by-" + strings.ReplaceAll(who.UserName, ":", "-"), Namespace: ns}}
		if _, err := as.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Errorf("with the broker killed, %s's write in %s is refused: %v", who.UserName, ns, err)
		}
	}
}

// systemIdentities are the system's own identities, which no webhook
// intercepts, each granted ConfigMap writes in ns so that only admission
// can refuse them.
func systemIdentities(t *testing.T, cp *controlplane.ControlPlane, ns string) []rest.ImpersonationConfig {
	t.Helper()
	ids := []rest.ImpersonationConfig{
		{UserName: "system:node:lockout-node", Groups: []string{"system:nodes", "system:authenticated"}},
		{UserName: "system:kube-controller-manager", Groups: []string{"system:authenticated"}},
		{UserName: "system:serviceaccount:kube-system:namespace-controller",
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}},
	}
	const grant = "lockout-system-writers"
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: grant, Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}}},
	}
	if _, err := cp.Client().RbacV1().Roles(ns).Create(context.Background(), role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a Role for ConfigMap writes in %s: %v", ns, err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: grant, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: grant},
	}
	for _, id := range ids {
		rb.Subjects = append(rb.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: id.UserName})
	}
	if _, err := cp.Client().RbacV1().RoleBindings(ns).Create(context.Background(), rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("granting the system identities ConfigMap writes in %s: %v", ns, err)
	}
	return ids
}

func impersonating(cfg *rest.Config, who rest.ImpersonationConfig) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = who
	return cfg
}

// refusedMessage is the refusal of runEveryConfigMapValidator's handler.
const refusedMessage = "ConfigMaps named refused-* are refused"

// runEveryConfigMapValidator runs, in this process until the test ends, a
// handler that validates ConfigMaps in every namespace, failing closed, and
// refuses those whose name starts with "refused-".
func runEveryConfigMapValidator(t *testing.T, name, brokerAddr string) {
	h := sdk.New(name, sdk.WithInsecure(),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{Name: name, Output: testenv.LogWriter(t, "")})),
		sdk.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond))
	h.OnValidate(sdk.GVR("", "v1", "configmaps"), func(_ context.Context, r *sdk.Review) error {
		if strings.HasPrefix(r.Name, "refused-") {
			return sdk.Deny(refusedMessage)
		}
		return nil
	}, sdk.ID("every-configmap"), sdk.Failure(sdk.FailClosed), sdk.Timeout(2*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx, brokerAddr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("handler %s: %v", name, err)
		}
	})
}

// brokerProcess is cmd/broker running as a real process, so that a test can
// kill it.
type brokerProcess struct {
	proc *example.Process
	addr string        // gRPC
	out  testenv.Lines // what it logs
}

// startBrokerProcess runs the broker binary with admission, in namespace,
// until the test ends.
func startBrokerProcess(t *testing.T, cp *controlplane.ControlPlane, namespace string, extra ...string) *brokerProcess {
	t.Helper()
	addr, err := example.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	b := &brokerProcess{addr: addr}
	b.out.Log = testenv.LogWriter(t, "")
	args := append([]string{"--kubeconfig", cp.KubeconfigPath(), "--listen", addr, "--insecure", "--namespace", namespace,
		"--metrics-listen", "", "--admission-listen", "127.0.0.1:0"}, extra...)
	b.proc, err = example.Start("broker", gobin.Build(t, "github.com/tether-dev/tether/cmd/broker"), args, &b.out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.proc.Kill)
	return b
}
