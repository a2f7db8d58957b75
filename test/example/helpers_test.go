package example

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/gobin"
	"github.com/tether-dev/tether/test/testenv"
)

// waitTimeout bounds every wait on the cluster or a process.
const waitTimeout = 30 * time.Second

var (
	secretsGVR    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

func TestMain(m *testing.M) { os.Exit(controlplane.RunTests(m)) }

// binaries builds the broker and the example handler once per test binary,
// with the race detector.
func binaries(t *testing.T) Binaries {
	return Binaries{
		Broker:  gobin.Build(t, "github.com/tether-dev/tether/cmd/broker", "-race"),
		Handler: gobin.Build(t, "github.com/tether-dev/tether/cmd/example-handler", "-race"),
	}
}

// env is one test's broker and example handler, running as processes.
type env struct {
	cp *controlplane.ControlPlane
	// dyn is the admin, the broker's own user: the webhooks the broker
	// writes let its requests through without a review.
	dyn dynamic.Interface
	// tester is another user, whose requests the webhooks review.
	tester  dynamic.Interface
	handler string // the handler name, unique per test
	ns      string // the namespace the handler binds to
	// addr is the broker's gRPC address, brokerNS its namespace.
	addr, brokerNS string
}

// start runs a broker, serving admission, and the example handler, bound
// to a new namespace, with a 1s reconcile interval and a 200ms ttl
// interval, and waits until the handler is connected. Both stop when the
// test ends; the handler must then exit cleanly on SIGTERM.
func start(t *testing.T) *env {
	t.Helper()
	e := startBroker(t)
	e.startHandler(t, "--kubeconfig", e.cp.KubeconfigPath(), "--namespaces", e.ns)
	return e
}

// startBroker runs a broker serving admission, until the test ends, for a
// handler bound to a new namespace (e.ns) to connect to (startHandler).
func startBroker(t *testing.T) *env {
	t.Helper()
	cp := controlplane.Get(t)
	tester, err := dynamic.NewForConfig(asTester(cp.RESTConfig()))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{cp: cp, dyn: cp.Dynamic(t), tester: tester, handler: "ex-" + randomSuffix(), ns: cp.Namespace(t)}
	if e.addr, err = FreeAddr(); err != nil {
		t.Fatal(err)
	}
	admissionAddr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	// The broker has a namespace of the test's own, apart from the one the
	// handler binds: its presence Leases and webhook certificates stay apart
	// from other tests' brokers, and no webhook is sent its namespace, which
	// the handler's TTL webhook binds.
	e.brokerNS = cp.Namespace(t)
	broker, err := Start("broker", binaries(t).Broker, []string{"--kubeconfig", cp.KubeconfigPath(), "--listen", e.addr,
		"--insecure", "--namespace", e.brokerNS, "--default-backoff", "100ms", "--default-max-backoff", "1s",
		"--admission-listen", admissionAddr},
		testenv.LogWriter(t, "broker: "))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broker.Stop(10 * time.Second) })
	return e
}

// startHandler runs the example handler with args besides the test's
// defaults, until the test ends, and waits until it is connected.
func (e *env) startHandler(t *testing.T, args ...string) {
	t.Helper()
	handler, err := Start("example-handler", binaries(t).Handler, append([]string{"--broker", e.addr, "--insecure",
		"--name", e.handler, "--reconcile-interval", "1s", "--ttl-interval", "200ms", "--log-level", "debug"}, args...),
		testenv.LogWriter(t, "handler: "))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := handler.Stop(15 * time.Second); err != nil {
			t.Errorf("the handler did not stop cleanly on SIGTERM: %v", err)
		}
	})
	eventually(t, "handler "+e.handler+" connected (its presence Lease counts 1 instance)", func() bool {
		l, err := e.cp.Client().CoordinationV1().Leases(e.brokerNS).Get(context.Background(), "tether-handler-"+e.handler, metav1.GetOptions{})
		return err == nil && l.Annotations["tether.dev/instances"] == "1"
	})
}

// asTester impersonates another user than the broker's, whose requests
// the webhooks review: the broker and the tests share the admin's
// credentials.
func asTester(cfg *rest.Config) *rest.Config {
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tester", Groups: []string{"system:masters", "system:authenticated"}}
	return cfg
}

// namespaces creates n more namespaces for the test.
func (e *env) namespaces(t *testing.T, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = e.cp.Namespace(t)
	}
	return out
}

func randomSuffix() string {
	return strings.ToLower(rand.Text()[:8])
}

// eventually polls cond until it holds or waitTimeout passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, what, cond)
}

// get reads an object; nil when it does not exist.
func (e *env) get(t *testing.T, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := e.dyn.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("getting %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
	return obj
}

// waitFor waits until the object satisfies cond (called with nil when it
// does not exist) and returns it.
func (e *env) waitFor(t *testing.T, gvr schema.GroupVersionResource, ns, name, what string, cond func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	var obj *unstructured.Unstructured
	eventually(t, fmt.Sprintf("%s %s/%s: %s", gvr.Resource, ns, name, what), func() bool {
		obj = e.get(t, gvr, ns, name)
		return cond(obj)
	})
	return obj
}

func gone(obj *unstructured.Unstructured) bool { return obj == nil }

// object builds a Secret (data values are plain text, turned into base64)
// or a ConfigMap.
func object(gvr schema.GroupVersionResource, ns, name string, annotations, data map[string]string) *unstructured.Unstructured {
	kind, payload := "ConfigMap", map[string]any{}
	for k, v := range data {
		payload[k] = v
	}
	if gvr == secretsGVR {
		kind = "Secret"
		for k, v := range data {
			payload[k] = b64(v)
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns},
		"data":     payload,
	}}
	u.SetAnnotations(annotations)
	return u
}

func (e *env) create(t *testing.T, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	out, err := e.dyn.Resource(gvr).Namespace(obj.GetNamespace()).Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s %s/%s: %v", gvr.Resource, obj.GetNamespace(), obj.GetName(), err)
	}
	return out
}

func (e *env) del(t *testing.T, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	if err := e.dyn.Resource(gvr).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
}

// held reports whether obj carries the test handler's hold.
func (e *env) held(obj *unstructured.Unstructured) bool {
	for _, f := range obj.GetFinalizers() {
		if f == HoldPrefix+e.handler {
			return true
		}
	}
	return false
}

// dataOf returns obj's data value for key: decoded for a Secret.
func dataOf(obj *unstructured.Unstructured, key string) string {
	v, _, _ := unstructured.NestedString(obj.Object, "data", key)
	if obj.GetKind() == "Secret" {
		return unb64(v)
	}
	return v
}

// checkCopy fails the test unless obj is a proper copy of source ns/name:
// labelled, naming its source, with no other replicator annotation.
func checkCopy(t *testing.T, obj *unstructured.Unstructured, source string) {
	t.Helper()
	if obj.GetLabels()[LabelCopy] != "true" {
		t.Errorf("copy %s/%s lacks the label %s=true: %v", obj.GetNamespace(), obj.GetName(), LabelCopy, obj.GetLabels())
	}
	for k, v := range obj.GetAnnotations() {
		switch {
		case k == AnnSource && v != source:
			t.Errorf("copy %s/%s: %s = %q, want %q", obj.GetNamespace(), obj.GetName(), k, v, source)
		case k != AnnSource && strings.HasPrefix(k, ReplicatorPrefix):
			t.Errorf("copy %s/%s carries the replicator annotation %s", obj.GetNamespace(), obj.GetName(), k)
		}
	}
	if obj.GetAnnotations()[AnnSource] != source {
		t.Errorf("copy %s/%s does not name its source %s", obj.GetNamespace(), obj.GetName(), source)
	}
	if len(obj.GetFinalizers()) > 0 {
		t.Errorf("copy %s/%s is held: %v", obj.GetNamespace(), obj.GetName(), obj.GetFinalizers())
	}
}

// warnings lists the Warning Events about the named object.
func (e *env) warnings(t *testing.T, ns, name string) []corev1.Event {
	t.Helper()
	list, err := e.cp.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name + ",type=Warning",
	})
	if err != nil {
		t.Fatalf("listing events: %v", err)
	}
	return list.Items
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func unb64(s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "<not base64: " + s + ">"
	}
	return string(b)
}
