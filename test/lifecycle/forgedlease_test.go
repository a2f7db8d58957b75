package lifecycle

import (
	"context"
	"crypto/tls"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/kube/kubetest"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/webhook"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// The tests in this file play a presence Lease written by someone who may
// write Leases in the broker's namespace and nothing else, against a broker
// that authenticates handlers, and a genuine Lease restored by such a
// broker.

// restartable is a broker that authenticates handlers, with admission,
// that a test can stop and start again on the same namespace.
type restartable struct {
	*secure
	opts broker.Options
	stop func()
}

func startRestartable(t *testing.T, cp *controlplane.ControlPlane) *restartable {
	t.Helper()
	ns := cp.Namespace(t)
	serverTLS, pool := selfSigned(t)
	r := &restartable{
		secure: &secure{cp: cp, ns: ns, clientTLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		opts: broker.Options{
			Log:    hclog.New(&hclog.LoggerOptions{Name: "broker", Level: hclog.Info, Output: testenv.LogWriter(t, "")}),
			Config: cp.RESTConfig(), Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", TLS: serverTLS,
			Defaults: testDefaults, Namespace: ns, Admission: broker.Admission{Listen: "127.0.0.1:0"},
		},
	}
	r.opts.Absence.Grace = time.Second
	r.start(t)
	return r
}

// start starts the broker and waits until it is ready: it has restored
// the handlers recorded in the Leases.
func (r *restartable) start(t *testing.T) {
	t.Helper()
	var b *broker.Broker
	b, r.stop = testenv.StartBroker(t, r.opts)
	r.addr = b.Addr().String()
	eventually(t, "the broker ready", func() bool { return ready("http://" + b.MetricsAddr().String() + "/readyz") })
}

// leaseWriter returns a client of a ServiceAccount that may write Leases
// in the broker's namespace, and nothing else.
func (r *restartable) leaseWriter(t *testing.T) (kubernetes.Interface, string) {
	t.Helper()
	r.grant(t, "leases", "forger", rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
		Verbs: []string{"get", "list", "create", "update"}})
	cfg := r.cp.RESTConfig()
	cfg.BearerToken, cfg.BearerTokenFile, cfg.Username, cfg.Password = r.token(t, "forger"), "", "", ""
	cfg.CertFile, cfg.KeyFile, cfg.CertData, cfg.KeyData = "", "", nil, nil
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube, "system:serviceaccount:" + r.ns + ":forger"
}

// TestAForgedLeaseIsNotRestored: a real handler holds a widget with a STRICT
// hold and stops. While the broker is down, a ServiceAccount that may only
// write Leases in the broker's namespace writes, with presence's own
// encoder, a Lease for a made-up handler with a fail-closed STRICT validate
// binding on ConfigMaps, and rewrites the real handler's Lease to sweep
// widgets of its holds. The restarted broker restores neither: the made-up
// handler's Lease is unsigned, so its recorded identity is checked and
// denied, and the real handler's was signed by the broker and no longer
// matches its signature. It posts a HandlerNotRestored Event on both
// Leases and `broker status` says why, no
// webhook configuration is written for the made-up handler, and the real
// handler's hold stays until the real handler, back, runs its delete.
func TestAForgedLeaseIsNotRestored(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	r := startRestartable(t, cp)
	objects := cp.Namespace(t)
	var j journal
	realHandler := strictHeldThenStopped(t, cp, r, objects, &j)

	kube, forger := r.leaseWriter(t)
	store := &presence.Store{Client: kubetest.Wrap(kube), Namespace: r.ns}
	now := time.Now()
	configmaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	forged := presence.Record{
		Handler: "forged", Grace: time.Hour, AbsentReleaseAfter: 24 * time.Hour, AbsentSince: now, LastSeen: now,
		Holder: "broker", User: presence.User{Name: forger},
		Bindings: []*tetherv1.Binding{{
			Id: "validate-0", Kind: tetherv1.BindingKind_BINDING_KIND_VALIDATE, Namespaces: []string{objects},
			Resource:  &tetherv1.Resource{Version: "v1", Resource: "configmaps"},
			Finalizer: tetherv1.FinalizerPolicy_FINALIZER_POLICY_STRICT,
			Admission: &tetherv1.AdmissionOptions{FailurePolicy: tetherv1.FailurePolicy_FAILURE_POLICY_FAIL},
		}},
		Resources: []schema.GroupVersionResource{configmaps},
	}
	sweep := presence.Record{
		Handler: "real", Grace: time.Hour, AbsentReleaseAfter: 24 * time.Hour, AbsentSince: now, LastSeen: now,
		Holder: "broker", User: presence.User{Name: forger},
		Sweep: []presence.Scope{{Resource: widgetGVR, Namespaces: []string{objects}}},
	}
	for _, rec := range []presence.Record{forged, sweep} {
		if err := store.Put(context.Background(), rec); err != nil {
			t.Fatalf("writing the Lease of %s as a ServiceAccount that may write Leases: %v", rec.Handler, err)
		}
	}
	hooks := cp.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations()
	config := webhook.ConfigName("forged")
	t.Cleanup(func() { _ = hooks.Delete(context.Background(), config, metav1.DeleteOptions{}) })

	r.start(t)
	var hookErr error
	held := true
	testenv.Eventually(t, waitTimeout, "a HandlerNotRestored Event on both Leases, or the broker acting on them", func() bool {
		_, hookErr = hooks.Get(context.Background(), config, metav1.GetOptions{})
		held = hold.Has(get(t, dyn, widgetGVR, objects, "w"), "real")
		return hookErr == nil || !held ||
			hasEvent(t, cp, r.ns, presence.LeaseName("forged"), "HandlerNotRestored", forger) &&
				hasEvent(t, cp, r.ns, presence.LeaseName("real"), "HandlerNotRestored", "signature does not match")
	})
	if hookErr == nil {
		t.Errorf("the broker wrote the webhook configuration %s for a handler only a Lease vouched for", config)
	}
	if !held {
		t.Fatal("the real handler's STRICT hold was swept on the say of a Lease it did not write")
	}
	out, err := exec.Command(brokerBinary(t), "status", "--kubeconfig", cp.KubeconfigPath(), "--namespace", r.ns).CombinedOutput()
	if err != nil {
		t.Fatalf("broker status: %v\n%s", err, out)
	}
	for _, h := range []string{"forged", "real"} {
		if !strings.Contains(string(out), "handler "+h+" was not restored from its lease") {
			t.Errorf("broker status does not say %s was not restored:\n%s", h, out)
		}
	}

	// The real handler signs in again, its rights checked at Hello: its
	// hold is its own again, and its delete runs.
	runHandler(t, realHandler(), r.addr)
	del(t, dyn, widgetGVR, objects, "w")
	j.waitCount(t, sdk.Delete, "w", 1)
	waitObject(t, dyn, widgetGVR, objects, "w", "released by the real handler's delete", gone)
}

// TestAGenuineLeaseIsRestoredWithAuthentication: a handler granted its
// rights holds a widget and stops; the broker stops, the widget is deleted,
// and the broker starts again. The identity the handler's Lease records
// passes the rights check, so the handler is restored and its hold released
// after its grace, as it would be without authentication.
func TestAGenuineLeaseIsRestoredWithAuthentication(t *testing.T) {
	cp := controlplane.Get(t)
	r := startRestartable(t, cp)
	objects := heldThenStopped(t, cp, r, "genuine")
	releasedAfterRestart(t, cp, r, objects, "genuine")
}

// strictHeldThenStopped grants the handler "real" its rights over the
// widgets of objects, runs it with a STRICT delete binding recorded in j
// until it holds the widget w there, then stops it and the broker; it
// returns how to make the handler again.
func strictHeldThenStopped(t *testing.T, cp *controlplane.ControlPlane, r *restartable, objects string, j *journal) (realHandler func() *sdk.Handler) {
	t.Helper()
	r.grant(t, "real", "real", handlerRule("real", "connect", "strict"))
	r.grantIn(t, objects, "real", "real", widgetRule("get", "list", "watch", "patch"))
	realHandler = func() *sdk.Handler {
		h := r.handler("real", r.token(t, "real"))
		h.OnDelete(widgets, j.record(nil), sdk.Namespaces(objects), sdk.Finalizer(sdk.FinalizerStrict))
		return h
	}
	stopReal := runHandler(t, realHandler(), r.addr)
	createHeld(t, cp, objects, "real", "w")
	stopReal()
	r.stop()
	return realHandler
}

// heldThenStopped grants the handler name its rights over the widgets of a
// namespace of its own, runs it until it holds the widget w there, then
// stops it and the broker; it returns the namespace.
func heldThenStopped(t *testing.T, cp *controlplane.ControlPlane, r *restartable, name string) (objects string) {
	t.Helper()
	cp.EnsureWidgetCRD(t)
	objects = cp.Namespace(t)
	r.grant(t, name, name, handlerRule(name, "connect"))
	r.grantIn(t, objects, name, name, widgetRule("get", "list", "watch", "patch"))
	h := r.handler(name, r.token(t, name))
	h.OnDelete(widgets, nothing, sdk.Namespaces(objects))
	stop := runHandler(t, h, r.addr)
	createHeld(t, cp, objects, name, "w")
	stop()
	r.stop()
	return objects
}

// releasedAfterRestart deletes the widget w the absent handler holds,
// starts the broker again and waits for the restored handler's hold to be
// released after its grace, with no HandlerNotRestored Event.
func releasedAfterRestart(t *testing.T, cp *controlplane.ControlPlane, r *restartable, objects, name string) {
	t.Helper()
	dyn := cp.Dynamic(t)
	del(t, dyn, widgetGVR, objects, "w")
	r.start(t)
	waitObject(t, dyn, widgetGVR, objects, "w", "released by the restarted broker after the grace", gone)
	if hasEvent(t, cp, r.ns, presence.LeaseName(name), "HandlerNotRestored", "") {
		t.Errorf("the Lease of %s was refused", name)
	}
}
