package deploy

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/test/controlplane"
)

// writesPolicy is the ValidatingAdmissionPolicy of deploy/broker that keeps
// the broker's own writes on what handlers bind to Tether's finalizers and
// annotations.
const writesPolicy = "tether-broker-writes"

// TestBrokerChangesOnlyTetherMetadata: RBAC lets the broker patch the whole
// of a bound widget; the API server, by the policy tether-broker-writes,
// lets its own identity (a real token of its ServiceAccount) add and remove
// finalizers and annotations of the tether.dev domain, and refuses a
// change to the spec, a label, another finalizer or another annotation.
// What it keeps for itself (a Lease and a ConfigMap in its namespace, the
// leader label on its Pod) it still writes whole.
func TestBrokerChangesOnlyTetherMetadata(t *testing.T) {
	cp, _ := applyManifests(t)
	admin := cp.EnsureWidgetCRD(t)
	grantBrokerWidgets(t, cp)
	bindToBroker(t, cp, "tether-broker-widgets")
	objNS := cp.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": objNS, "finalizers": []any{"example.com/keep"},
			"annotations": map[string]any{"owner": "ops"}, "labels": map[string]any{"app": "w"}},
		"spec": map[string]any{"size": int64(1)},
	}}
	if _, err := admin.Resource(controlplane.WidgetGVR).Namespace(objNS).Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Resource(controlplane.WidgetGVR).Namespace(objNS).Patch(context.Background(), "w", types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	cfg := asBroker(ctx, t, cp)
	dyn := dynamic.NewForConfigOrDie(cfg)
	widget := dyn.Resource(controlplane.WidgetGVR).Namespace(objNS)
	patch := func(p string) error {
		_, err := widget.Patch(ctx, "w", types.MergePatchType, []byte(p), metav1.PatchOptions{})
		return err
	}
	refused := func(what, p string) {
		t.Helper()
		if err := patch(p); err == nil || !strings.Contains(err.Error(), writesPolicy) {
			t.Errorf("%s as the broker: %v, want the refusal of %s", what, err, writesPolicy)
		}
	}
	allowed := func(what, p string) {
		t.Helper()
		if err := patch(p); err != nil {
			t.Errorf("%s as the broker: %v", what, err)
		}
	}

	// The policy takes effect once the API server has loaded it.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(30 * time.Second); ; <-tick.C {
		err := patch(`{"spec":{"size":2}}`)
		if err != nil && strings.Contains(err.Error(), writesPolicy) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a change to the spec as the broker: %v, want the refusal of %s", err, writesPolicy)
		}
	}
	allowed("a hold and a last-handled annotation",
		`{"metadata":{"finalizers":["example.com/keep","tether.dev/example"],"annotations":{"example.tether.dev/last-handled":"{}"}}}`)
	allowed("a stored result", `{"metadata":{"annotations":{"example.tether.dev/result.b":"\"ok\""}}}`)
	refused("a label", `{"metadata":{"labels":{"app":"other"}}}`)
	refused("a new label", `{"metadata":{"labels":{"tether.dev/leader":"true"}}}`)
	refused("another annotation", `{"metadata":{"annotations":{"owner":"me"}}}`)
	refused("another finalizer added", `{"metadata":{"finalizers":["example.com/keep","tether.dev/example","example.com/mine"]}}`)
	refused("another finalizer removed", `{"metadata":{"finalizers":["tether.dev/example"]}}`)
	allowed("the hold and annotations released",
		`{"metadata":{"finalizers":["example.com/keep"],"annotations":{"example.tether.dev/last-handled":null,"example.tether.dev/result.b":null}}}`)
	got, err := admin.Resource(controlplane.WidgetGVR).Namespace(objNS).Get(ctx, "w", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 1 || got.GetLabels()["app"] != "w" ||
		got.GetAnnotations()["owner"] != "ops" || strings.Join(got.GetFinalizers(), ",") != "example.com/keep" {
		t.Errorf("after the broker's patches the widget is %v", got.Object)
	}

	// What it keeps for itself in its namespace, written whole.
	kube := cp.Client()
	cm, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tether-writes-test"},
		Data: map[string]string{"ca.crt": "a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = kube.CoreV1().ConfigMaps(ns).Delete(context.Background(), cm.Name, metav1.DeleteOptions{}) }()
	cm.Data["ca.crt"], cm.Labels = "b", map[string]string{"x": "y"}
	if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Errorf("its own ConfigMap as the broker: %v", err)
	}
}
