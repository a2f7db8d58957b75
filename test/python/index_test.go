package pyhandler

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/test/controlplane"
)

// TestAnIndexIsCompleteBeforeDeliveriesAndRebuiltByANewProcess runs
// index_handler.py (an index of labelled ConfigMaps by namespace, and a
// create that returns what the index holds for the widget's namespace)
// against a real broker. A widget there before the handler is created with
// both ConfigMaps there before it in its result: the delivery waited for
// the index's whole list. A ConfigMap added or deleted later shows in the
// result of a widget created after it, soon (as in Kopf, an index follows
// its resource as the handler's functions run, not in step with them), and
// a new process (the first one killed) builds the index again from the
// broker's stream before its first delivery, though the objects in it were
// all listed to the first.
func TestAnIndexIsCompleteBeforeDeliveriesAndRebuiltByANewProcess(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	b := startBroker(t, cp, "127.0.0.1:0")
	const name = "py-index"
	colour := func(cm, c string) {
		t.Helper()
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Namespace: ns,
			Labels: map[string]string{"test.tether.dev/colour": c}}}
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating ConfigMap %s: %v", cm, err)
		}
	}
	// colours is what the index held for the widget's create.
	colours := func(widget string) []string {
		t.Helper()
		var got struct{ Colours []string }
		waitWidget(t, dyn, ns, widget, "created with its result in status.create", func(o *unstructured.Unstructured) bool {
			if o == nil {
				return false
			}
			result, ok, _ := unstructured.NestedFieldNoCopy(o.Object, "status", "create")
			if !ok {
				return false
			}
			raw, err := json.Marshal(result)
			return err == nil && json.Unmarshal(raw, &got) == nil
		})
		return got.Colours
	}
	wantColours := func(widget string, want ...string) {
		t.Helper()
		if got := colours(widget); !reflect.DeepEqual(got, want) {
			t.Errorf("widget %s: the index held %v for its namespace, want %v", widget, got, want)
		}
	}
	// soonColours creates widgets named after prefix, one at a time, until
	// one's create saw want.
	soonColours := func(prefix string, want ...string) {
		t.Helper()
		n := 0
		eventually(t, fmt.Sprintf("a widget created with %v in the index", want), func() bool {
			n++
			widget := fmt.Sprintf("%s-%d", prefix, n)
			createWidget(t, dyn, ns, widget, nil)
			return reflect.DeepEqual(colours(widget), want)
		})
	}
	run := func() *handlerProcess {
		script, err := filepath.Abs("index_handler.py")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(python, "-E", "-s", "-B", "-u", "-m", "tether", "run", script, "--broker", b.addr,
			"--insecure", "--name", name, "--namespace", ns)
		cmd.Dir = sdkDir
		return startProcess(t, name, cmd)
	}

	colour("a", "red")
	colour("b", "blue")
	createWidget(t, dyn, ns, "first", nil)
	h := run()
	wantColours("first", "blue", "red")

	colour("c", "green")
	soonColours("second", "blue", "green", "red")

	if err := kube.CoreV1().ConfigMaps(ns).Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	soonColours("third", "blue", "green")

	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-h.done
	run()
	createWidget(t, dyn, ns, "fourth", nil)
	wantColours("fourth", "blue", "green")
}
