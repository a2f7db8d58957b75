package admission

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/example"
	"github.com/tether-dev/tether/test/gobin"
	"github.com/tether-dev/tether/test/testenv"
)

func TestMain(m *testing.M) { os.Exit(controlplane.RunTests(m)) }

// waitTimeout bounds every wait on the cluster or a handler.
const waitTimeout = 30 * time.Second

// env is one test's broker, its namespace and a client.
type env struct {
	cp     *controlplane.ControlPlane
	kube   *kubernetes.Clientset
	ns     string // where the handler's bindings apply
	broker string // gRPC address
	b      *broker.Broker
	// brokerNS is the broker's namespace (its Leases and certificates).
	brokerNS string
	// stop ends the broker and waits for it; the test's end calls it too.
	stop func()
}

// start runs a broker with admission in this process until the test ends.
func start(t testing.TB, tweaks ...func(*broker.Options)) *env {
	t.Helper()
	cp := controlplane.Get(t)
	level := hclog.Info
	if _, bench := t.(*testing.B); bench {
		level = hclog.Warn // a benchmark's output is its table
	}
	opts := broker.Options{
		Log:       hclog.New(&hclog.LoggerOptions{Name: "broker", Level: level, Output: testenv.LogWriter(t, "")}),
		Config:    cp.RESTConfig(),
		Listen:    "127.0.0.1:0",
		Insecure:  true,
		Defaults:  binding.Defaults{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second},
		Namespace: cp.Namespace(t),
		Admission: broker.Admission{Listen: "127.0.0.1:0"},
	}
	for _, tweak := range tweaks {
		tweak(&opts)
	}
	b, stop := testenv.StartBroker(t, opts)
	return &env{cp: cp, kube: kubernetes.NewForConfigOrDie(asTester(cp.RESTConfig())), ns: cp.Namespace(t),
		broker: b.Addr().String(), b: b, brokerNS: opts.Namespace, stop: stop}
}

// asTester impersonates another user than the broker's: the webhooks let
// the broker's own writes through unreviewed, and the broker here uses the
// same admin credentials as the test.
func asTester(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tester", Groups: []string{"system:masters", "system:authenticated"}}
	return cfg
}

// handlerBinary builds ./admissionhandler once per test run.
func handlerBinary(t testing.TB) string {
	return gobin.Build(t, "github.com/tether-dev/tether/test/admission/admissionhandler")
}

// handler is ./admissionhandler running as a real process.
type handler struct {
	name string
	proc *example.Process
	out  testenv.Lines // stdout and stderr
}

// startHandler runs the admission handler named name against e's broker,
// for e's namespace, until the test ends.
func (e *env) startHandler(t testing.TB, name string, extra ...string) *handler {
	t.Helper()
	h := &handler{name: name}
	if _, bench := t.(*testing.B); !bench { // a benchmark's output is its table
		h.out.Log = testenv.LogWriter(t, "")
	}
	args := append([]string{"--broker", e.broker, "--name", name, "--namespace", e.ns}, extra...)
	p, err := example.Start(name, handlerBinary(t), args, &h.out)
	if err != nil {
		t.Fatal(err)
	}
	h.proc = p
	t.Cleanup(h.kill)
	return h
}

// saw reports whether the handler printed a line starting with prefix.
func (h *handler) saw(prefix string) bool {
	return h.out.Any(func(l string) bool { return strings.HasPrefix(l, prefix) })
}

// kill ends the handler with SIGKILL, as a crash would, and waits for it.
func (h *handler) kill() {
	h.proc.Kill()
}

// eventually polls cond until it holds or waitTimeout passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, what, cond)
}

// webhookConfigured reports whether the handler's validating configuration
// exists with a webhook for its owner-required binding.
func (e *env) webhookConfigured(t testing.TB, handler string) bool {
	cfg, err := e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "tether-"+handler, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(cfg.Webhooks) > 0
}

// secret builds a Secret in e's namespace, with the owner annotation when
// owner is not empty.
func (e *env) secret(name, owner string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}, StringData: map[string]string{"k": "v"}}
	if owner != "" {
		s.Annotations = map[string]string{"example.tether.dev/owner": owner}
	}
	return s
}

// createSecret creates a Secret and returns the API server's error.
func (e *env) createSecret(name, owner string) error {
	_, err := e.kube.CoreV1().Secrets(e.ns).Create(context.Background(), e.secret(name, owner), metav1.CreateOptions{})
	return err
}

// warningsOf collects the warnings the API server returns, per request.
type warningsOf struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningsOf) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warningsOf) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// clientWithWarnings is a client whose warnings land in w.
func (e *env) clientWithWarnings(t testing.TB, w *warningsOf) *kubernetes.Clientset {
	cfg := asTester(e.cp.RESTConfig())
	cfg.WarningHandler = w
	return kubernetes.NewForConfigOrDie(cfg)
}
