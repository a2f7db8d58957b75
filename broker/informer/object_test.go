package informer

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

func widget() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{
			"name": "w", "namespace": "ns", "uid": "u1", "resourceVersion": "17",
			"labels":        map[string]any{"app": "a"},
			"finalizers":    []any{"tether.dev/h"},
			"managedFields": []any{map[string]any{"manager": "kubectl", "fieldsV1": map[string]any{"f:spec": map[string]any{}}}},
		},
		"spec": map[string]any{"size": int64(3), "ratio": 0.5},
	}}
}

func TestEncodeKeepsEverythingButManagedFields(t *testing.T) {
	u := widget()
	before := u.DeepCopy()
	c, err := Encode(u)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(u, before) {
		t.Error("Encode changed the object it was given")
	}
	if strings.Contains(string(c.Raw), "managedFields") {
		t.Errorf("managedFields cached: %s", c.Raw)
	}
	if c.Namespace != "ns" || c.Name != "w" || c.UID != "u1" || c.ResourceVersion != "17" || c.Deleting {
		t.Errorf("fields %+v", c)
	}
	back, err := c.Decode()
	if err != nil {
		t.Fatal(err)
	}
	want := before.DeepCopy()
	want.SetManagedFields(nil)
	if !reflect.DeepEqual(back.Object, want.Object) {
		t.Errorf("decoded\n%v\nwant\n%v", back.Object, want.Object)
	}
	// Each Decode is a copy of its own.
	back.SetLabels(nil)
	if again, _ := c.Decode(); again.GetLabels()["app"] != "a" {
		t.Error("changing a decoded object changed the cached one")
	}
}

func TestEncodeMarksDeletion(t *testing.T) {
	u := widget()
	now := metav1.Now()
	u.SetDeletionTimestamp(&now)
	c, err := Encode(u)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Deleting {
		t.Error("an object with a deletionTimestamp not marked Deleting")
	}
}

func TestCachedObjectsAreKeyedByNamespaceAndName(t *testing.T) {
	c, err := Encode(widget())
	if err != nil {
		t.Fatal(err)
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(c)
	if err != nil || key != "ns/w" {
		t.Errorf("key %q, %v; want ns/w", key, err)
	}
}

func TestNewerThan(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"10", "9", true},
		{"9", "10", false},
		{"10", "10", true},
		{"x", "10", true}, // not etcd's: the latest notification wins
	} {
		a, b := &Object{ResourceVersion: tc.a}, &Object{ResourceVersion: tc.b}
		if got := a.NewerThan(b); got != tc.want {
			t.Errorf("%s newer than %s: %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
