package raw

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/test/bench/workload"
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

func labelled(u *unstructured.Unstructured, labels map[string]string) *unstructured.Unstructured {
	u.SetLabels(labels)
	return u
}

func withStatus(u *unstructured.Unstructured) *unstructured.Unstructured {
	u.Object["status"] = map[string]any{workload.StatusField: true}
	return u
}

// TestPatch: one guarded patch per new object, one per deleted object, and
// none when there is nothing to do, for each workload; status is never in
// the patch (it is a write of its own).
func TestPatch(t *testing.T) {
	result := map[string]string{ResultAnnotation: `{"ok":true}`}
	const (
		testRV     = `{"op":"test","path":"/metadata/resourceVersion","value":"7"}`
		addFin     = `{"op":"add","path":"/metadata/finalizers","value":["bench.example.com/raw"]}`
		appendFin  = `{"op":"add","path":"/metadata/finalizers/-","value":"bench.example.com/raw"}`
		removeFin1 = `[{"op":"test","path":"/metadata/finalizers/1","value":"bench.example.com/raw"},{"op":"remove","path":"/metadata/finalizers/1"}]`
	)
	for _, tc := range []struct {
		name string
		work string
		obj  *unstructured.Unstructured
		want string // the JSON patch, "null" for none
	}{
		{"new", workload.Result, widget(nil, nil, false),
			`[` + testRV + `,` + addFin + `,{"op":"add","path":"/metadata/annotations","value":{"bench.example.com/result":"{\"ok\":true}"}}]`},
		{"others' finalizer and annotation", workload.Result, widget([]string{"x/y"}, map[string]string{"a": "b"}, false),
			`[` + testRV + `,` + appendFin + `,{"op":"add","path":"/metadata/annotations/bench.example.com~1result","value":"{\"ok\":true}"}]`},
		{"held, no result", workload.Result, widget([]string{Finalizer}, nil, false),
			`[` + testRV + `,{"op":"add","path":"/metadata/annotations","value":{"bench.example.com/result":"{\"ok\":true}"}}]`},
		{"done", workload.Result, widget([]string{Finalizer}, result, false), `null`},
		{"deleting", workload.Result, widget([]string{"x/y", Finalizer}, result, true), removeFin1},
		{"deleting, released", workload.Result, widget([]string{"x/y"}, result, true), `null`},
		{"label: new", workload.Label, widget(nil, nil, false),
			`[` + testRV + `,` + addFin + `,{"op":"add","path":"/metadata/labels","value":{"bench.example.com/handled":"true"}}]`},
		{"label: others' label", workload.Label, labelled(widget(nil, nil, false), map[string]string{"a": "b"}),
			`[` + testRV + `,` + addFin + `,{"op":"add","path":"/metadata/labels/bench.example.com~1handled","value":"true"}]`},
		{"label: done", workload.Label, labelled(widget([]string{Finalizer}, nil, false), map[string]string{workload.LabelKey: "true"}), `null`},
		{"label: deleting", workload.Label, labelled(widget([]string{"x/y", Finalizer}, nil, true), map[string]string{workload.LabelKey: "true"}), removeFin1},
		{"status: new, the finalizer only", workload.Status, widget(nil, nil, false), `[` + testRV + `,` + addFin + `]`},
		{"status: held, status missing", workload.Status, widget([]string{Finalizer}, nil, false), `null`},
		{"status: deleting", workload.Status, withStatus(widget([]string{"x/y", Finalizer}, nil, true)), removeFin1},
	} {
		got, err := json.Marshal(patch(tc.obj, tc.work))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// TestNeedsStatus: the status write is made for a live object of the
// status workload that lacks it, held or not yet.
func TestNeedsStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		work string
		obj  *unstructured.Unstructured
		want bool
	}{
		{"new", workload.Status, widget(nil, nil, false), true},
		{"held", workload.Status, widget([]string{Finalizer}, nil, false), true},
		{"written", workload.Status, withStatus(widget([]string{Finalizer}, nil, false)), false},
		{"deleting", workload.Status, widget([]string{Finalizer}, nil, true), false},
		{"another workload", workload.Label, widget(nil, nil, false), false},
	} {
		if got := needsStatus(tc.obj, tc.work); got != tc.want {
			t.Errorf("%s: needsStatus = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDone(t *testing.T) {
	result := map[string]string{ResultAnnotation: `{"ok":true}`}
	for _, tc := range []struct {
		name string
		work string
		obj  *unstructured.Unstructured
		want bool
	}{
		{"held with a result", workload.Result, widget([]string{Finalizer}, result, false), true},
		{"result, not held", workload.Result, widget(nil, result, false), false},
		{"held, no result", workload.Result, widget([]string{Finalizer}, nil, false), false},
		{"held with the label", workload.Label, labelled(widget([]string{Finalizer}, nil, false), map[string]string{workload.LabelKey: "true"}), true},
		{"held with a result, no label", workload.Label, widget([]string{Finalizer}, result, false), false},
		{"held with status", workload.Status, withStatus(widget([]string{Finalizer}, nil, false)), true},
		{"status, not held", workload.Status, withStatus(widget(nil, nil, false)), false},
		{"held, no status", workload.Status, widget([]string{Finalizer}, nil, false), false},
	} {
		if got := Done(tc.obj, tc.work); got != tc.want {
			t.Errorf("%s: Done = %v, want %v", tc.name, got, tc.want)
		}
	}
}
