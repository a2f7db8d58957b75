package raw

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func widget(finalizers []string, annotations map[string]string, deleting bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "test.tether.dev/v1", "kind": "Widget"}}
	u.SetName("w")
	u.SetResourceVersion("7")
	u.SetFinalizers(finalizers)
	u.SetAnnotations(annotations)
	if deleting {
		now := metav1.Now()
		u.SetDeletionTimestamp(&now)
	}
	return u
}

// TestPatch: one guarded patch per new object, one per deleted object, and
// none when there is nothing to do.
func TestPatch(t *testing.T) {
	result := map[string]string{ResultAnnotation: `{"ok":true}`}
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		want string // the JSON patch, "null" for none
	}{
		{"new", widget(nil, nil, false),
			`[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"add","path":"/metadata/finalizers","value":["bench.example.com/raw"]},{"op":"add","path":"/metadata/annotations","value":{"bench.example.com/result":"{\"ok\":true}"}}]`},
		{"others' finalizer and annotation", widget([]string{"x/y"}, map[string]string{"a": "b"}, false),
			`[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"add","path":"/metadata/finalizers/-","value":"bench.example.com/raw"},{"op":"add","path":"/metadata/annotations/bench.example.com~1result","value":"{\"ok\":true}"}]`},
		{"held, no result", widget([]string{Finalizer}, nil, false),
			`[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"add","path":"/metadata/annotations","value":{"bench.example.com/result":"{\"ok\":true}"}}]`},
		{"done", widget([]string{Finalizer}, result, false), `null`},
		{"deleting", widget([]string{"x/y", Finalizer}, result, true),
			`[{"op":"test","path":"/metadata/finalizers/1","value":"bench.example.com/raw"},{"op":"remove","path":"/metadata/finalizers/1"}]`},
		{"deleting, released", widget([]string{"x/y"}, result, true), `null`},
	} {
		got, err := json.Marshal(patch(tc.obj))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestDone(t *testing.T) {
	result := map[string]string{ResultAnnotation: `{"ok":true}`}
	if !Done(widget([]string{Finalizer}, result, false)) {
		t.Error("held with a result: not done")
	}
	if Done(widget(nil, result, false)) || Done(widget([]string{Finalizer}, nil, false)) {
		t.Error("done without the finalizer or without the result")
	}
}
