package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/gobin"
	"github.com/tether-dev/tether/test/testenv"
)

// waitTimeout bounds every wait on the cluster or a handler.
const waitTimeout = 30 * time.Second

var (
	widgetGVR  = schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}
	secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	widgets    = sdk.GVR("test.tether.dev", "v1", "widgets")
	secrets    = sdk.GVR("", "v1", "secrets")
)

// testDefaults make retries quick enough for tests.
var testDefaults = binding.Defaults{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second, Timeout: 10 * time.Second}

// startBroker runs a broker in this process until the test ends and returns
// its address.
func startBroker(t testing.TB, cp *controlplane.ControlPlane, tweaks ...func(*broker.Options)) string {
	t.Helper()
	addr, _ := startStoppableBroker(t, cp, tweaks...)
	return addr
}

// startStoppableBroker is startBroker that also returns the broker's stop.
func startStoppableBroker(t testing.TB, cp *controlplane.ControlPlane, tweaks ...func(*broker.Options)) (addr string, stop func()) {
	t.Helper()
	opts := broker.Options{
		Log:      hclog.New(&hclog.LoggerOptions{Name: "broker", Level: hclog.Info, Output: testenv.LogWriter(t, "")}),
		Config:   cp.RESTConfig(),
		Listen:   "127.0.0.1:0",
		Insecure: true,
		Defaults: testDefaults,
		// Each test's broker keeps its handlers' Leases apart.
		Namespace: cp.Namespace(t),
	}
	for _, tweak := range tweaks {
		tweak(&opts)
	}
	b, stop := testenv.StartBroker(t, opts)
	return b.Addr().String(), stop
}

// asTester is a client that writes as another user than the broker's,
// which uses the same admin credentials as the test: the webhooks let the
// broker's own writes through unreviewed.
func asTester(cp *controlplane.ControlPlane) dynamic.Interface {
	cfg := cp.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tester", Groups: []string{"system:masters", "system:authenticated"}}
	return dynamic.NewForConfigOrDie(cfg)
}

// runHandler runs h against the broker until the returned stop is called
// (or the test ends); stop waits for Run to return.
func runHandler(t *testing.T, h *sdk.Handler, addr string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, addr) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("handler %s: %v", h.Name(), err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// handlerOpts are the SDK options every test handler uses.
func handlerOpts(t *testing.T) []sdk.Option {
	return []sdk.Option{
		sdk.WithInsecure(),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{Name: "handler", Level: hclog.Info, Output: testenv.LogWriter(t, "")})),
		sdk.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond),
	}
}

// journal records what a handler was given, in order.
type journal struct {
	mu     sync.Mutex
	events []*sdk.Event
}

func (j *journal) add(ev *sdk.Event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events = append(j.events, ev)
}

// record returns a handler function that records and then calls next (if
// any).
func (j *journal) record(next sdk.Func) sdk.Func {
	return func(ctx context.Context, ev *sdk.Event) error {
		j.add(ev)
		if next != nil {
			return next(ctx, ev)
		}
		return nil
	}
}

// find returns the recorded events of kind for the named object.
func (j *journal) find(kind sdk.EventKind, name string) []*sdk.Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []*sdk.Event
	for _, ev := range j.events {
		if ev.Kind == kind && ev.Name == name {
			out = append(out, ev)
		}
	}
	return out
}

func (j *journal) names(kind sdk.EventKind) []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []string
	for _, ev := range j.events {
		if ev.Kind == kind {
			out = append(out, ev.Name)
		}
	}
	return out
}

// waitCount waits until the journal holds exactly n events of kind for name.
func (j *journal) waitCount(t *testing.T, kind sdk.EventKind, name string, n int) []*sdk.Event {
	t.Helper()
	var got []*sdk.Event
	eventually(t, fmt.Sprintf("%d %s event(s) for %s", n, kind, name), func() bool {
		got = j.find(kind, name)
		return len(got) >= n
	})
	if len(got) != n {
		t.Fatalf("%s events for %s: got %d, want %d", kind, name, len(got), n)
	}
	return got
}

// eventually polls cond until it holds or waitTimeout passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, what, cond)
}

// get reads an object; nil when it does not exist.
func get(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := dyn.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		t.Fatalf("getting %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
	return obj
}

// waitObject waits until the object satisfies cond (nil means it is gone).
func waitObject(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, name, what string, cond func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	var obj *unstructured.Unstructured
	eventually(t, fmt.Sprintf("%s %s/%s: %s", gvr.Resource, ns, name, what), func() bool {
		obj = get(t, dyn, gvr, ns, name)
		return cond(obj)
	})
	return obj
}

func gone(obj *unstructured.Unstructured) bool { return obj == nil }

func widget(ns, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     spec,
	}}
}

func create(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	out, err := dyn.Resource(gvr).Namespace(obj.GetNamespace()).Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s %s: %v", gvr.Resource, obj.GetName(), err)
	}
	return out
}

func del(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	if err := dyn.Resource(gvr).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
}

// events lists the Kubernetes Events about the named object.
func events(t *testing.T, cp *controlplane.ControlPlane, ns, name string) []corev1.Event {
	t.Helper()
	list, err := cp.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name,
	})
	if err != nil {
		t.Fatalf("listing events: %v", err)
	}
	return list.Items
}

// brokerProcess is the broker binary running as a real process.
type brokerProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	addr string
	out  testenv.Lines // what it logs
}

// brokerBinary builds cmd/broker, with the race detector, once per test run.
func brokerBinary(t *testing.T) string {
	return gobin.Build(t, "github.com/tether-dev/tether/cmd/broker", "-race")
}

// startBrokerProcess starts the broker binary on addr (":0" is not possible:
// handlers must find it again after a restart, so the caller picks a port).
func startBrokerProcess(t *testing.T, cp *controlplane.ControlPlane, addr, namespace string, extra ...string) *brokerProcess {
	t.Helper()
	return startBrokerBinary(t, brokerBinary(t), cp, addr, namespace, extra...)
}

// startBrokerBinary is startBrokerProcess with the broker binary bin.
func startBrokerBinary(t *testing.T, bin string, cp *controlplane.ControlPlane, addr, namespace string, extra ...string) *brokerProcess {
	t.Helper()
	args := append([]string{"--kubeconfig", cp.KubeconfigPath(), "--listen", addr, "--insecure", "--namespace", namespace,
		"--default-backoff", "100ms", "--default-max-backoff", "1s"}, extra...)
	cmd := exec.Command(bin, args...)
	p := &brokerProcess{cmd: cmd, done: make(chan struct{}), addr: addr}
	p.out.Log = testenv.LogWriter(t, "")
	cmd.Stdout = &p.out
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the broker: %v", err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// kill ends the broker with SIGKILL, as a crash would, and waits for it.
func (p *brokerProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

var metav1UpdateOptions = metav1.UpdateOptions{}

// removeFinalizers clears the finalizers of obj (as its other controller
// would), guarded by a test of the list as read.
func removeFinalizers(t *testing.T, dyn dynamic.Interface, obj *unstructured.Unstructured) {
	t.Helper()
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/finalizers", "value": obj.GetFinalizers()},
		{"op": "remove", "path": "/metadata/finalizers"},
	})
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: obj.GroupVersionKind().Group, Version: obj.GroupVersionKind().Version}
	switch obj.GetKind() {
	case "Widget":
		gvr.Resource = "widgets"
	case "Secret":
		gvr.Resource = "secrets"
	}
	if _, err := dyn.Resource(gvr).Namespace(obj.GetNamespace()).Patch(context.Background(), obj.GetName(),
		types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("removing finalizers of %s: %v", obj.GetName(), err)
	}
}
