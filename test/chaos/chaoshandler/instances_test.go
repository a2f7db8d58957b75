package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/test/chaos"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/pyinterp"
	"github.com/tether-dev/tether/test/testenv"
)

func TestMain(m *testing.M) { os.Exit(controlplane.RunTests(m)) }

// TestGoAndPythonInstancesServeOneHandler: the Python instance
// (handler.py) declares the Go instance's bindings exactly, so the broker
// takes both as instances of one handler (it refuses an instance whose
// bindings differ), both are given objects and reviews, and the Python
// one's lines are chaos.Delivery records as the Go one's are.
func TestGoAndPythonInstancesServeOneHandler(t *testing.T) {
	if why := pyinterp.PythonMissing(); why != "" {
		t.Skip(why)
	}
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	brokerLog := &testenv.Lines{Log: testenv.LogWriter(t, "broker: ")}
	b, _ := testenv.StartBroker(t, broker.Options{
		Log:       hclog.New(&hclog.LoggerOptions{Name: "broker", Level: hclog.Info, Output: brokerLog}),
		Config:    cp.RESTConfig(),
		Listen:    "127.0.0.1:0",
		Insecure:  true,
		Namespace: cp.Namespace(t),
		Admission: broker.Admission{Listen: "127.0.0.1:0"},
	})
	bin := filepath.Join(t.TempDir(), "chaoshandler")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	flags := func(instance string) []string {
		return []string{"--brokers", b.Addr().String(), "--namespace", ns, "--instance", instance, "--grace", "5s"}
	}
	goOut := start(t, "go", exec.Command(bin, flags("go-1")...))
	script, err := filepath.Abs("handler.py")
	if err != nil {
		t.Fatal(err)
	}
	pyOut := start(t, "py", exec.Command(pyinterp.Python, append([]string{"-I", "-B", "-u", script}, flags("py-1")...)...))
	testenv.Eventually(t, time.Minute, "both instances connected", func() bool {
		return brokerLog.Count(func(l string) bool { return strings.Contains(l, "handler instance connected") }) == 2
	})

	// As another user than the broker's, whose own requests skip the
	// webhooks.
	cfg := cp.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tester", Groups: []string{"system:masters"}}
	dyn, err = dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	widgets := dyn.Resource(controlplane.WidgetGVR).Namespace(ns)
	const n = 20
	for i := range n {
		w := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "test.tether.dev/v1", "kind": "Widget",
			"metadata": map[string]any{"name": fmt.Sprintf("w%d", i)}, "spec": map[string]any{"size": int64(i)},
		}}
		if _, err := widgets.Create(context.Background(), w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns}}
	if _, err := cp.Client().CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The broker spreads objects over instances by UID: both are given some
	// of the 20 widgets, but for a chance of 2 in a million.
	for _, out := range []*testenv.Lines{goOut, pyOut} {
		testenv.Eventually(t, time.Minute, "creates delivered to each instance", func() bool {
			return len(deliveries(t, out, chaos.BindingCreate)) > 0
		})
	}
	testenv.Eventually(t, time.Minute, "all 20 creates delivered", func() bool {
		return len(deliveries(t, goOut, chaos.BindingCreate))+len(deliveries(t, pyOut, chaos.BindingCreate)) >= n
	})
	testenv.Eventually(t, time.Minute, "the ConfigMap's NONE timer ticking", func() bool {
		return len(deliveries(t, goOut, chaos.BindingNoneTimer))+len(deliveries(t, pyOut, chaos.BindingNoneTimer)) > 0
	})
	// The API server calls a new webhook a moment after its configuration
	// is written: update until a review arrives.
	testenv.Eventually(t, time.Minute, "a review of an update", func() bool {
		patch := fmt.Sprintf(`{"spec":{"touched":%d}}`, time.Now().UnixNano())
		if _, err := widgets.Patch(context.Background(), "w0", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		return len(deliveries(t, goOut, chaos.BindingValidate))+len(deliveries(t, pyOut, chaos.BindingValidate)) > 0
	})
	for _, d := range deliveries(t, pyOut, chaos.BindingCreate) {
		if d.Instance != "py-1" || d.Kind != "create" || d.Resource != chaos.Widgets || d.Namespace != ns ||
			d.UID == "" || d.ResourceVersion == "" || d.Attempt < 1 || d.Outcome != "ok" || d.Answered.Before(d.Received) {
			t.Errorf("the Python instance's delivery record %+v is not what the Go instance writes", d)
		}
	}
	if got := brokerLog.Count(func(l string) bool { return strings.Contains(l, "bindings differ") }); got != 0 {
		t.Errorf("the broker refused an instance %d time(s) for its bindings", got)
	}
}

// start runs cmd until the test ends; its stdout is kept, its stderr goes
// to the test log.
func start(t *testing.T, label string, cmd *exec.Cmd) *testenv.Lines {
	t.Helper()
	out := &testenv.Lines{Log: testenv.LogWriter(t, label+": ")}
	cmd.Stdout, cmd.Stderr = out, testenv.LogWriter(t, label+" stderr: ")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", label, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return out
}

// deliveries are the delivery records of binding among out's lines.
func deliveries(t *testing.T, out *testenv.Lines, binding string) []chaos.Delivery {
	t.Helper()
	var ds []chaos.Delivery
	for _, l := range out.All() {
		var d chaos.Delivery
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("a line that is no delivery record: %q: %v", l, err)
		}
		if d.Binding == binding {
			ds = append(ds, d)
		}
	}
	return ds
}
