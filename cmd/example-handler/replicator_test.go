package main

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tether-dev/tether/sdk"
)

func TestSelectNamespaces(t *testing.T) {
	all := []string{"a", "b", "c", "d", "kube-system", "kube-public", "kube-node-lease"}
	for _, tc := range []struct {
		name, self, include, exclude string
		want                         []string
	}{
		{"every other namespace but the system ones", "a", "", "", []string{"b", "c", "d"}},
		{"include limits", "a", "b,c", "", []string{"b", "c"}},
		{"exclude removes", "a", "", "d", []string{"b", "c"}},
		{"exclude wins over include", "a", "b,c,d", "d", []string{"b", "c"}},
		{"never the source's own namespace", "a", "a,b", "", []string{"b"}},
		{"never a system namespace, even included", "a", "b,kube-system,kube-public,kube-node-lease", "", []string{"b"}},
		{"blanks and empty items ignored", "a", " b , ,c ", " ", []string{"b", "c"}},
		{"included namespaces that do not exist are skipped", "a", "b,missing", "", []string{"b"}},
		{"nothing left", "a", "a", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := selectNamespaces(all, tc.self, tc.include, tc.exclude)
			if !slices.Equal(got, tc.want) {
				t.Errorf("selectNamespaces(self=%q, include=%q, exclude=%q) = %q, want %q",
					tc.self, tc.include, tc.exclude, got, tc.want)
			}
		})
	}
}

func TestActiveNamespacesSkipsTerminating(t *testing.T) {
	now := metav1.Now()
	got := activeNamespaces([]corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "live"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "going", DeletionTimestamp: &now}},
		{ObjectMeta: metav1.ObjectMeta{Name: "phase"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}},
	})
	if !slices.Equal(got, []string{"live"}) {
		t.Errorf("activeNamespaces = %q, want [live]", got)
	}
}

// source returns a Secret that asks to be replicated.
func source() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"data": map[string]any{"password": "czNjcjN0"},
		"metadata": map[string]any{
			"name": "db", "namespace": "src", "uid": "uid-src", "resourceVersion": "42",
			"finalizers": []any{"tether.dev/example"},
			"labels":     map[string]any{"app": "db"},
			"annotations": map[string]any{
				annEnabled:                        "true",
				annInclude:                        "a,b",
				annExclude:                        "c",
				"example.tether.dev/last-handled": "{}",
				"ttl.tether.dev/ttl":              "1h",
				lastApplied:                       `{"data":{"password":"czNjcjN0"}}`,
				"team":                            "storage",
			},
		},
	}}
}

func TestBuildCopyStripsTetherAnnotationsAndMarksTheCopy(t *testing.T) {
	c := buildCopy(source(), "a", nil)
	if c.GetNamespace() != "a" || c.GetName() != "db" {
		t.Errorf("copy is %s/%s, want a/db", c.GetNamespace(), c.GetName())
	}
	wantAnns := map[string]string{"team": "storage", annSource: "src/db"}
	if got := c.GetAnnotations(); !maps.Equal(got, wantAnns) {
		t.Errorf("annotations = %v, want %v", got, wantAnns)
	}
	wantLabels := map[string]string{"app": "db", labelCopy: "true"}
	if got := c.GetLabels(); !maps.Equal(got, wantLabels) {
		t.Errorf("labels = %v, want %v", got, wantLabels)
	}
	if c.GetUID() != "" || c.GetResourceVersion() != "" || len(c.GetFinalizers()) > 0 {
		t.Errorf("a new copy carries the source's identity: uid %q rv %q finalizers %v",
			c.GetUID(), c.GetResourceVersion(), c.GetFinalizers())
	}
	if got, _, _ := unstructured.NestedString(c.Object, "data", "password"); got != "czNjcjN0" {
		t.Errorf("data.password = %q", got)
	}
	if got, _, _ := unstructured.NestedString(c.Object, "type"); got != "Opaque" {
		t.Errorf("type = %q", got)
	}
	// The copy is a deep copy: changing it leaves the source alone.
	_ = unstructured.SetNestedField(c.Object, "x", "data", "password")
	if got, _, _ := unstructured.NestedString(source().Object, "data", "password"); got != "czNjcjN0" {
		t.Error("the copy shares data with the source")
	}
}

func TestBuildCopyUpdatesAnExistingCopyInPlace(t *testing.T) {
	cur := buildCopy(source(), "a", nil)
	cur.SetUID("uid-copy")
	cur.SetResourceVersion("7")
	cur.SetFinalizers([]string{"other.example.com/keep"})
	anns := cur.GetAnnotations()
	anns["audit.tether.dev/last-handled"] = "{}" // another handler's bookkeeping
	anns["stale"] = "gone from the source"
	anns[annInclude] = "x" // never on a copy
	cur.SetAnnotations(anns)

	want := buildCopy(source(), "a", cur)
	if want.GetUID() != "uid-copy" || want.GetResourceVersion() != "7" {
		t.Errorf("update loses the copy's identity: uid %q rv %q", want.GetUID(), want.GetResourceVersion())
	}
	if !slices.Equal(want.GetFinalizers(), []string{"other.example.com/keep"}) {
		t.Errorf("finalizers = %v, want the copy's own", want.GetFinalizers())
	}
	got := want.GetAnnotations()
	if got["audit.tether.dev/last-handled"] != "{}" {
		t.Error("another handler's bookkeeping on the copy was dropped")
	}
	if _, ok := got["stale"]; ok {
		t.Error("an annotation the source no longer has stays on the copy")
	}
	if _, ok := got[annInclude]; ok {
		t.Error("a replicator setting stays on the copy")
	}
	if upToDate(cur, want) {
		t.Error("upToDate says a drifted copy is current")
	}
	if !upToDate(want, buildCopy(source(), "a", want)) {
		t.Error("upToDate says a current copy has drifted")
	}
}

func TestUpToDateSeesPayloadDrift(t *testing.T) {
	cur := buildCopy(source(), "a", nil)
	drifted := cur.DeepCopy()
	_ = unstructured.SetNestedField(drifted.Object, "b3RoZXI=", "data", "password")
	if upToDate(drifted, buildCopy(source(), "a", drifted)) {
		t.Error("changed data counts as up to date")
	}
	extra := cur.DeepCopy()
	extra.Object["immutable"] = true
	if upToDate(extra, buildCopy(source(), "a", extra)) {
		t.Error("an extra field counts as up to date")
	}
}

func TestTetherAnnotation(t *testing.T) {
	for key, want := range map[string]bool{
		annEnabled:                        true,
		annSource:                         true,
		"ttl.tether.dev/ttl":              true,
		"tether.dev/anything":             true,
		"example.tether.dev/last-handled": true,
		"nottether.dev/x":                 false,
		"example.com/tether.dev":          false,
		"team":                            false,
	} {
		if got := tetherAnnotation(key); got != want {
			t.Errorf("tetherAnnotation(%q) = %v, want %v", key, got, want)
		}
	}
}

// fakeReplicator returns a replicator on fake clients holding objs and the
// namespaces given.
func fakeReplicator(namespaces []string, objs ...runtime.Object) (*replicator, *dynamicfake.FakeDynamicClient) {
	var nsObjs []runtime.Object
	for _, n := range namespaces {
		nsObjs = append(nsObjs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		secretsGVR:                              "SecretList",
		{Version: "v1", Resource: "configmaps"}: "ConfigMapList",
	}, objs...)
	return &replicator{kube: kubefake.NewClientset(nsObjs...), dyn: dyn}, dyn
}

func TestSyncSkipsANonCopyAndPrunesOldTargets(t *testing.T) {
	ctx := context.Background()
	foreign := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "db", "namespace": "b"},
		"data":     map[string]any{"password": "bWluZQ=="},
	}}
	stale := buildCopy(source(), "old", nil) // a copy in a namespace no longer targeted
	r, dyn := fakeReplicator([]string{"src", "a", "b", "c", "old"}, foreign, stale)

	err := r.sync(ctx, secretsGVR, sdk.NewEvent(sdk.Create, source()))
	var perm *sdk.PermanentError
	if !errors.As(err, &perm) || !strings.Contains(err.Error(), "b/db") {
		t.Fatalf("sync = %v, want a permanent error naming b/db", err)
	}
	secrets := dyn.Resource(secretsGVR)
	if got, err := secrets.Namespace("a").Get(ctx, "db", metav1.GetOptions{}); err != nil || !isCopyOf(got, "src/db") {
		t.Errorf("no copy in a: %v", err)
	}
	got, err := secrets.Namespace("b").Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pw, _, _ := unstructured.NestedString(got.Object, "data", "password"); pw != "bWluZQ==" || isCopyOf(got, "src/db") {
		t.Errorf("the foreign Secret in b was overwritten: %v", got.Object)
	}
	for _, ns := range []string{"c", "old"} {
		if _, err := secrets.Namespace(ns).Get(ctx, "db", metav1.GetOptions{}); err == nil {
			t.Errorf("a copy exists in %s, which is not a target", ns)
		}
	}
}

func TestCleanupDeletesOnlyThisSourcesCopies(t *testing.T) {
	ctx := context.Background()
	other := source()
	other.SetNamespace("elsewhere")
	r, dyn := fakeReplicator(nil, buildCopy(source(), "a", nil), buildCopy(other, "b", nil))
	if err := r.cleanup(ctx, secretsGVR, sdk.NewEvent(sdk.Delete, source())); err != nil {
		t.Fatal(err)
	}
	secrets := dyn.Resource(secretsGVR)
	if _, err := secrets.Namespace("a").Get(ctx, "db", metav1.GetOptions{}); err == nil {
		t.Error("the copy in a survived its source")
	}
	if _, err := secrets.Namespace("b").Get(ctx, "db", metav1.GetOptions{}); err != nil {
		t.Errorf("the copy of another source was deleted: %v", err)
	}
}

// TestSyncKeepsToItsNamespaces: a handler granted namespace by namespace
// copies only into those namespaces, however wide the include list, and
// lists copies only there (a cluster-wide list would be refused).
func TestSyncKeepsToItsNamespaces(t *testing.T) {
	ctx := context.Background()
	src := source()
	src.SetAnnotations(map[string]string{annEnabled: "true"})
	r, dyn := fakeReplicator([]string{"src", "a", "b", "kube-system"})
	r.within = []string{"src", "a"}
	dyn.PrependReactor("list", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "" {
			t.Error("listed copies cluster-wide")
		}
		return false, nil, nil
	})
	if err := r.sync(ctx, secretsGVR, sdk.NewEvent(sdk.Create, src)); err != nil {
		t.Fatal(err)
	}
	secrets := dyn.Resource(secretsGVR)
	if got, err := secrets.Namespace("a").Get(ctx, "db", metav1.GetOptions{}); err != nil || !isCopyOf(got, "src/db") {
		t.Errorf("no copy in a: %v", err)
	}
	for _, ns := range []string{"b", "kube-system"} {
		if _, err := secrets.Namespace(ns).Get(ctx, "db", metav1.GetOptions{}); err == nil {
			t.Errorf("a copy exists in %s, which did not opt in", ns)
		}
	}
}
