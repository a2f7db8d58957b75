package pyhandler

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/pyinterp"
	"github.com/tether-dev/tether/test/testenv"
)

const (
	// python runs the handlers: Debian's, which has python3-grpcio and
	// python3-protobuf.
	python = pyinterp.Python
	// waitTimeout bounds every wait on the cluster, the broker or the handler.
	waitTimeout = 30 * time.Second

	createdLabel    = "python.tether.dev/created"
	ticksAnnotation = "python.example.com/ticks" // *.tether.dev annotations are the broker's
	// welcomed is the SDK's log line once the broker has welcomed the handler.
	welcomed = "connected to the broker"
)

var widgetGVR = controlplane.WidgetGVR

func TestMain(m *testing.M) { os.Exit(controlplane.RunTests(m)) }

// needPython skips the test when the handler cannot run here.
func needPython(t *testing.T) {
	t.Helper()
	if why := pyinterp.PythonMissing(); why != "" {
		t.Skip(why)
	}
}

// TestCreateTickDelete walks a Widget through the Python handler's three
// bindings: create labels it and stores a result while the delete binding's
// hold goes on, the timer's patches count ticks, and delete is delivered
// before the hold is released and the Widget goes.
func TestCreateTickDelete(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	const name = "py-widgets"
	h := startHandler(t, b.addr, name, "--namespace", ns)
	h.stdout.wait(t, welcomed, 1)

	createWidget(t, dyn, ns, "w1", map[string]any{"size": int64(1)})
	obj := waitWidget(t, dyn, ns, "w1", "labelled, held and with a result", func(o *unstructured.Unstructured) bool {
		if o == nil {
			return false
		}
		_, stored, _ := unstructured.NestedFieldNoCopy(o.Object, "status", "create")
		return o.GetLabels()[createdLabel] == "true" && hold.Has(o, name) && stored
	})
	// Stored where Kopf stores it: status.<handler id>, the id= given.
	if result, _, _ := unstructured.NestedMap(obj.Object, "status", "create"); !reflect.DeepEqual(result, map[string]any{"lang": "python"}) {
		t.Errorf("status.create = %v, want {\"lang\":\"python\"}", result)
	}

	waitWidget(t, dyn, ns, "w1", "ticked twice", func(o *unstructured.Unstructured) bool {
		if o == nil {
			return false
		}
		n, err := strconv.Atoi(o.GetAnnotations()[ticksAnnotation])
		return err == nil && n >= 2
	})
	if n := h.stdout.count("delivered CREATE " + ns + "/w1 "); n != 1 {
		t.Errorf("create delivered %d times, want once", n)
	}

	deleteWidget(t, dyn, ns, "w1")
	h.stdout.wait(t, "delivered DELETE "+ns+"/w1 attempt 1", 1)
	waitWidget(t, dyn, ns, "w1", "gone", func(o *unstructured.Unstructured) bool { return o == nil })
}

// TestCancelIsAcked: a create that stalls past its binding's 2 s timeout is
// cancelled by the broker; the handler acks the cancelled delivery, which
// frees its slot, and the broker tries again.
func TestCancelIsAcked(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	h := startHandler(t, b.addr, "py-cancel", "--namespace", ns)
	h.stdout.wait(t, welcomed, 1)

	createWidget(t, dyn, ns, "stall", map[string]any{"stall": true})
	h.stdout.wait(t, "cancelled CREATE "+ns+"/stall attempt 1", 1)
	h.stdout.wait(t, "delivered CREATE "+ns+"/stall attempt 2", 1)
	if obj := getWidget(t, dyn, ns, "stall"); obj.GetLabels()[createdLabel] != "" {
		t.Errorf("a cancelled create was applied: labels %v", obj.GetLabels())
	}
}

// TestRejectedHelloExits: a Hello with an invalid label selector makes the
// broker end the stream with InvalidArgument, and the handler exits with
// status 2 and the broker's message on stderr instead of retrying.
func TestRejectedHelloExits(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	h := startHandler(t, b.addr, "py-bad", "--bad-binding")
	if code := h.waitExit(t, waitTimeout); code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	for _, want := range []string{"broker rejected hello", "INVALID_ARGUMENT", `bindings[3] ("bad")`, "label_selector"} {
		if !h.stderr.has(want) {
			t.Errorf("stderr does not say %q:\n%s", want, h.stderr.text())
		}
	}
	if h.stdout.has("reconnecting") {
		t.Error("the handler retried a rejected Hello")
	}
}

// TestSIGTERMSaysGoodbye: on SIGTERM the handler sends Goodbye, closes its
// side of the stream and exits 0 promptly; the broker logs the goodbye.
func TestSIGTERMSaysGoodbye(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	h := startHandler(t, b.addr, "py-goodbye", "--namespace", ns)
	h.stdout.wait(t, welcomed, 1)
	createWidget(t, dyn, ns, "busy", nil)
	waitWidget(t, dyn, ns, "busy", "created", func(o *unstructured.Unstructured) bool {
		return o != nil && o.GetLabels()[createdLabel] == "true"
	})

	start := time.Now()
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := h.waitExit(t, 10*time.Second); code != 0 {
		t.Errorf("exit status after SIGTERM %d, want 0", code)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v to exit after SIGTERM, want under 5s", took)
	}
	if !h.stdout.has("sending goodbye") {
		t.Error("the handler did not say it sent Goodbye")
	}
	b.log.wait(t, "handler instance says goodbye", 1)
	b.log.wait(t, "handler instance disconnected", 1)
}

// TestReconnectsAfterBrokerRestart: the handler survives the broker going
// away and serves the next broker on the same address.
func TestReconnectsAfterBrokerRestart(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := freeAddr(t)
	first := startBroker(t, cp, addr)
	h := startHandler(t, addr, "py-reconnect", "--namespace", ns, "--max-backoff", "1")
	h.stdout.wait(t, welcomed, 1)
	createWidget(t, dyn, ns, "before", nil)
	waitWidget(t, dyn, ns, "before", "created", func(o *unstructured.Unstructured) bool {
		return o != nil && o.GetLabels()[createdLabel] == "true"
	})

	first.stop()
	h.stdout.wait(t, "disconnected", 1)
	startBroker(t, cp, addr)
	h.stdout.wait(t, welcomed, 2)
	createWidget(t, dyn, ns, "after", nil)
	waitWidget(t, dyn, ns, "after", "created", func(o *unstructured.Unstructured) bool {
		return o != nil && o.GetLabels()[createdLabel] == "true"
	})
	if n := h.stdout.count("delivered CREATE " + ns + "/before "); n != 1 {
		t.Errorf("create of the widget handled before the restart delivered %d times, want once", n)
	}
	// Leave before the broker stops, which then need not wait for the stream.
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := h.waitExit(t, 10*time.Second); code != 0 {
		t.Errorf("exit status after SIGTERM %d, want 0", code)
	}
}

// runningBroker is an in-process broker.
type runningBroker struct {
	addr string
	log  *output
	stop func() // idempotent; waits for the broker to end
}

// startBroker runs a plain-text broker on addr ("127.0.0.1:0" for any port)
// until stop is called or the test ends; tweaks change its options.
func startBroker(t *testing.T, cp *controlplane.ControlPlane, addr string, tweaks ...func(*broker.Options)) *runningBroker {
	t.Helper()
	log := newOutput(t, "broker: ")
	opts := broker.Options{
		Log:      hclog.New(&hclog.LoggerOptions{Name: "broker", Level: hclog.Info, Output: log}),
		Config:   cp.RESTConfig(),
		Listen:   addr,
		Insecure: true,
		Defaults: binding.Defaults{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second, Timeout: 10 * time.Second},
	}
	for _, tweak := range tweaks {
		tweak(&opts)
	}
	b, stop := testenv.StartBroker(t, opts)
	return &runningBroker{addr: b.Addr().String(), log: log, stop: stop}
}

// freeAddr picks a free loopback port, for a broker that must come back on
// the same address.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// handlerProcess is handler.py running as a real process.
type handlerProcess struct {
	cmd            *exec.Cmd
	stdout, stderr *output
	done           chan struct{} // closed when the process has exited
}

// startHandler runs handler.py against the broker at addr until the test
// ends (then it is killed).
func startHandler(t *testing.T, addr, name string, args ...string) *handlerProcess {
	t.Helper()
	script, err := filepath.Abs("handler.py")
	if err != nil {
		t.Fatal(err)
	}
	// -I: ignore PYTHON* variables and the user's site-packages; -B: write
	// no __pycache__ into the source tree; -u: unbuffered output.
	argv := append([]string{"-I", "-B", "-u", script, "--broker", addr, "--name", name}, args...)
	return startProcess(t, name, exec.Command(python, argv...))
}

// startProcess starts cmd, a Python handler, with its output in the test
// log (each line prefixed with label) and runs it until the test ends (then
// it is killed).
func startProcess(t *testing.T, label string, cmd *exec.Cmd) *handlerProcess {
	t.Helper()
	p := &handlerProcess{
		cmd:    cmd,
		stdout: newOutput(t, label+" stdout: "),
		stderr: newOutput(t, label+" stderr: "),
		done:   make(chan struct{}),
	}
	p.cmd.Stdout = p.stdout
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting the Python handler: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// waitExit waits for the process to exit and returns its exit status.
func (p *handlerProcess) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("the Python handler is still running after %v", timeout)
		return -1
	}
}

// output records the Python handler's lines and copies them, a line at a
// time, to the test log.
type output struct{ testenv.Lines }

func newOutput(t *testing.T, prefix string) *output {
	return &output{testenv.Lines{Log: testenv.LogWriter(t, prefix)}}
}

// count returns how many lines contain s.
func (o *output) count(s string) int {
	return o.Count(func(line string) bool { return strings.Contains(line, s) })
}

func (o *output) has(s string) bool { return o.count(s) > 0 }

func (o *output) text() string { return o.Text() }

// wait waits until at least n lines contain s.
func (o *output) wait(t *testing.T, s string, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d line(s) with %q", n, s), func() bool { return o.count(s) >= n })
}

// eventually polls cond until it holds or waitTimeout passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, what, cond)
}

// newWidget builds a Widget with spec (nil: empty).
func newWidget(ns, name string, spec map[string]any) *unstructured.Unstructured {
	if spec == nil {
		spec = map[string]any{}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     spec,
	}}
}

func createWidget(t *testing.T, dyn dynamic.Interface, ns, name string, spec map[string]any) {
	t.Helper()
	if _, err := dyn.Resource(widgetGVR).Namespace(ns).Create(context.Background(), newWidget(ns, name, spec), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating widget %s/%s: %v", ns, name, err)
	}
}

func deleteWidget(t *testing.T, dyn dynamic.Interface, ns, name string) {
	t.Helper()
	if err := dyn.Resource(widgetGVR).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting widget %s/%s: %v", ns, name, err)
	}
}

// getWidget reads a widget; nil when it does not exist.
func getWidget(t *testing.T, dyn dynamic.Interface, ns, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := dyn.Resource(widgetGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("getting widget %s/%s: %v", ns, name, err)
	}
	return obj
}

// waitWidget waits until the widget satisfies cond (nil: it does not exist).
func waitWidget(t *testing.T, dyn dynamic.Interface, ns, name, what string, cond func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	var obj *unstructured.Unstructured
	eventually(t, fmt.Sprintf("widget %s/%s: %s", ns, name, what), func() bool {
		obj = getWidget(t, dyn, ns, name)
		return cond(obj)
	})
	return obj
}
