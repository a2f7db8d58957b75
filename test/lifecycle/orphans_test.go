package lifecycle

import (
	"context"
	"crypto/tls"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/webhook"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// TestAStrictOrphanIsSurfacedAndReleasedWithTheBrokerRunning: a STRICT
// handler holds a widget and keeps a fail-closed webhook; while it is
// connected the running broker refuses to release it. Its process stops and
// its ServiceAccount is deleted, so it can never sign in again, and the
// widget is deleted; another STRICT handler stops and loses its right to
// connect. The running broker finds both orphaned: `broker status` says so
// and why, and a HandlerOrphaned Event is posted on the first one's Lease.
// `broker release --handler` with the broker running releases the hold (the
// widget goes), removes the webhook configuration and the Lease, and a
// broker started again writes no webhook for it.
func TestAStrictOrphanIsSurfacedAndReleasedWithTheBrokerRunning(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	serverTLS, pool := selfSigned(t)
	opts := broker.Options{
		Log:    hclog.New(&hclog.LoggerOptions{Name: "broker", Level: hclog.Info, Output: testenv.LogWriter(t, "")}),
		Config: cp.RESTConfig(), Listen: "127.0.0.1:0", TLS: serverTLS, Defaults: testDefaults, Namespace: ns,
		Admission: broker.Admission{Listen: "127.0.0.1:0"}, RecheckEvery: 300 * time.Millisecond,
	}
	opts.Absence.Grace = time.Second
	b, stopBroker := testenv.StartBroker(t, opts)
	s := &secure{cp: cp, ns: ns, addr: b.Addr().String(), clientTLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	// The widgets live apart from the broker's namespace, which no webhook
	// is sent.
	objects := cp.Namespace(t)
	s.grant(t, "orphan", "orphan", handlerRule("orphan", "connect", "strict"))
	s.grantIn(t, objects, "orphan", "orphan", widgetRule("get", "list", "watch", "patch"))
	s.grantCluster(t, "orphan", "orphan", rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"},
		Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"create"}})

	h := s.handler("orphan", s.token(t, "orphan"))
	h.OnDelete(widgets, nothing, sdk.Namespaces(objects), sdk.Finalizer(sdk.FinalizerStrict))
	h.OnValidate(widgets, func(context.Context, *sdk.Review) error { return nil },
		sdk.Namespaces(objects), sdk.Failure(sdk.FailClosed), sdk.Finalizer(sdk.FinalizerStrict))
	stopHandler := runHandler(t, h, s.addr)
	revoke := s.grant(t, "revoked", "revoked", handlerRule("revoked", "connect", "strict"))
	// Apart from the widget, which it would hold too.
	elsewhere := cp.Namespace(t)
	s.grantIn(t, elsewhere, "revoked", "revoked", widgetRule("get", "list", "watch", "patch"))
	r := s.handler("revoked", s.token(t, "revoked"))
	r.OnDelete(widgets, nothing, sdk.Namespaces(elsewhere), sdk.Finalizer(sdk.FinalizerStrict))
	stopRevoked := runHandler(t, r, s.addr)
	create(t, dyn, widgetGVR, widget(objects, "w", nil))
	waitObject(t, dyn, widgetGVR, objects, "w", "held by orphan", func(o *unstructured.Unstructured) bool {
		return slices.Contains(o.GetFinalizers(), "tether.dev/orphan")
	})
	hooks := cp.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations()
	config := webhook.ConfigName("orphan")
	eventually(t, "the handler's webhook configuration", func() bool {
		_, err := hooks.Get(context.Background(), config, metav1.GetOptions{})
		return err == nil
	})

	bin := brokerBinary(t)
	brokerArgs := func(args ...string) *exec.Cmd {
		return exec.Command(bin, append(args, "--kubeconfig", cp.KubeconfigPath(), "--namespace", ns)...)
	}
	if out, err := brokerArgs("release", "--handler", "orphan").CombinedOutput(); err == nil || !strings.Contains(string(out), "refused") {
		t.Errorf("broker release of a connected handler: %v, want the broker's refusal:\n%s", err, out)
	}

	stopHandler()
	stopRevoked()
	revoke()
	if err := cp.Client().CoreV1().ServiceAccounts(ns).Delete(context.Background(), "orphan", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	del(t, dyn, widgetGVR, objects, "w")

	brokerCmd := func(args ...string) string {
		t.Helper()
		out, err := brokerArgs(args...).CombinedOutput()
		if err != nil {
			t.Fatalf("broker %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	lease := presence.LeaseName("orphan")
	eventually(t, "a HandlerOrphaned Event on the handler's Lease", func() bool {
		return slices.ContainsFunc(events(t, cp, ns, lease), func(e corev1.Event) bool { return e.Reason == "HandlerOrphaned" })
	})
	var out string
	eventually(t, "broker status to say both handlers are orphaned", func() bool {
		out = brokerCmd("status")
		return strings.Contains(out, "ServiceAccount "+ns+"/orphan is deleted") &&
			strings.Contains(out, "ServiceAccount "+ns+"/revoked may no longer sign in as handler revoked")
	})
	t.Logf("broker status:\n%s", out)
	if w := get(t, dyn, widgetGVR, objects, "w"); w == nil || w.GetDeletionTimestamp() == nil {
		t.Fatalf("the widget is not kept Terminating by the orphan's STRICT hold: %v", w)
	}

	out = brokerCmd("release", "--handler", "orphan", "--wait", "20s")
	if !strings.Contains(out, "the broker released handler orphan") {
		t.Errorf("broker release did not have the running broker release the handler:\n%s", out)
	}
	waitObject(t, dyn, widgetGVR, objects, "w", "gone with its hold released", gone)
	if _, err := hooks.Get(context.Background(), config, metav1.GetOptions{}); !isNotFound(err) {
		t.Errorf("the webhook configuration %s after the release: %v, want not found", config, err)
	}
	if _, err := cp.Client().CoordinationV1().Leases(ns).Get(context.Background(), lease, metav1.GetOptions{}); !isNotFound(err) {
		t.Errorf("the lease %s after the release: %v, want not found", lease, err)
	}

	stopBroker()
	opts.MetricsListen = "127.0.0.1:0"
	b2, _ := testenv.StartBroker(t, opts)
	eventually(t, "the restarted broker ready", func() bool { return ready("http://" + b2.MetricsAddr().String() + "/readyz") })
	if _, err := hooks.Get(context.Background(), config, metav1.GetOptions{}); !isNotFound(err) {
		t.Errorf("a restarted broker wrote the released handler's webhook configuration again: %v", err)
	}
	if _, err := cp.Client().CoordinationV1().Leases(ns).Get(context.Background(), lease, metav1.GetOptions{}); !isNotFound(err) {
		t.Errorf("a restarted broker brought the released handler's lease back: %v", err)
	}
}
