package hold

import (
	"encoding/json"
	"reflect"
	"testing"

	evanphx "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/jsonpatch"
)

func object(finalizers ...string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata":   map[string]any{"name": "s", "namespace": "ns", "resourceVersion": "7"},
	}}
	if finalizers != nil {
		u.SetFinalizers(finalizers)
	}
	return u
}

func patchJSON(t *testing.T, p jsonpatch.Patch) string {
	t.Helper()
	b, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// apply applies p to obj with the JSON-patch library the API server uses.
func apply(t *testing.T, obj *unstructured.Unstructured, p jsonpatch.Patch) (*unstructured.Unstructured, error) {
	t.Helper()
	doc, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := evanphx.DecodePatch([]byte(patchJSON(t, p)))
	if err != nil {
		t.Fatalf("library cannot decode our patch: %v", err)
	}
	out, err := decoded.Apply(doc)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func TestFinalizerIsTheHandlerUnderTheDomain(t *testing.T) {
	if got := Finalizer("secret-ttl"); got != "tether.dev/secret-ttl" {
		t.Errorf("Finalizer = %q", got)
	}
}

func TestHas(t *testing.T) {
	tests := []struct {
		name       string
		finalizers []string
		want       bool
	}{
		{"no finalizers", nil, false},
		{"held", []string{"tether.dev/h"}, true},
		{"held among others", []string{"example.com/x", "tether.dev/h"}, true},
		{"another handler", []string{"tether.dev/other"}, false},
		{"a prefix of the name", []string{"tether.dev/hh"}, false},
		{"another domain", []string{"x.tether.dev/h"}, false},
	}
	for _, tt := range tests {
		if got := Has(object(tt.finalizers...), "h"); got != tt.want {
			t.Errorf("%s: Has = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestHandlersListsOnlyTetherHolds(t *testing.T) {
	tests := []struct {
		name       string
		finalizers []string
		want       []string
	}{
		{"none", nil, nil},
		{"only others", []string{"kubernetes.io/pvc-protection", "example.com/x"}, nil},
		{"mixed, in list order", []string{"tether.dev/b", "example.com/x", "tether.dev/a"}, []string{"b", "a"}},
		{"a subdomain is not ours", []string{"sub.tether.dev/x", "tether.devx/y"}, nil},
		{"the bare prefix names no handler", []string{"tether.dev/"}, nil},
	}
	for _, tt := range tests {
		if got := Handlers(object(tt.finalizers...)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Handlers = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestAdd(t *testing.T) {
	tests := []struct {
		name       string
		finalizers []string
		want       string
		wantGuard  bool
	}{
		{
			name:      "without finalizers the list is added whole and guarded",
			want:      `[{"op":"add","path":"/metadata/finalizers","value":["tether.dev/h"]}]`,
			wantGuard: true,
		},
		{
			name:       "an empty list is added whole and guarded",
			finalizers: []string{},
			want:       `[{"op":"add","path":"/metadata/finalizers","value":["tether.dev/h"]}]`,
			wantGuard:  true,
		},
		{
			name:       "with other finalizers the list is tested and appended to",
			finalizers: []string{"example.com/x", "tether.dev/other"},
			want: `[{"op":"test","path":"/metadata/finalizers","value":["example.com/x","tether.dev/other"]},` +
				`{"op":"add","path":"/metadata/finalizers/-","value":"tether.dev/h"}]`,
		},
		{
			name:       "already held is no op",
			finalizers: []string{"example.com/x", "tether.dev/h"},
			want:       `[]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p jsonpatch.Patch
			guard := Add(&p, object(tt.finalizers...), "h")
			if got := patchJSON(t, p); got != tt.want {
				t.Errorf("patch\n got %s\nwant %s", got, tt.want)
			}
			if guard != tt.wantGuard {
				t.Errorf("guard = %v, want %v", guard, tt.wantGuard)
			}
		})
	}
}

func TestRemoveTestsTheExactElement(t *testing.T) {
	tests := []struct {
		name       string
		finalizers []string
		want       string
		wantHeld   bool
	}{
		{
			name:       "alone",
			finalizers: []string{"tether.dev/h"},
			want:       `[{"op":"test","path":"/metadata/finalizers/0","value":"tether.dev/h"},{"op":"remove","path":"/metadata/finalizers/0"}]`,
			wantHeld:   true,
		},
		{
			name:       "between others",
			finalizers: []string{"example.com/x", "tether.dev/other", "tether.dev/h", "example.com/y"},
			want:       `[{"op":"test","path":"/metadata/finalizers/2","value":"tether.dev/h"},{"op":"remove","path":"/metadata/finalizers/2"}]`,
			wantHeld:   true,
		},
		{
			name:       "not held",
			finalizers: []string{"example.com/x", "tether.dev/other"},
			want:       `[]`,
		},
		{
			name: "no finalizers",
			want: `[]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p jsonpatch.Patch
			held := Remove(&p, object(tt.finalizers...), "h")
			if got := patchJSON(t, p); got != tt.want {
				t.Errorf("patch\n got %s\nwant %s", got, tt.want)
			}
			if held != tt.wantHeld {
				t.Errorf("Remove = %v, want %v", held, tt.wantHeld)
			}
		})
	}
}

func TestPatchesKeepOtherControllersFinalizers(t *testing.T) {
	tests := []struct {
		name   string
		seen   []string
		now    []string // the list on the server when the patch lands
		change func(*jsonpatch.Patch, *unstructured.Unstructured) bool
		want   []string // nil: the patch must be refused
	}{
		{
			name:   "add next to another controller's finalizer",
			seen:   []string{"example.com/x"},
			now:    []string{"example.com/x"},
			change: func(p *jsonpatch.Patch, o *unstructured.Unstructured) bool { Add(p, o, "h"); return true },
			want:   []string{"example.com/x", "tether.dev/h"},
		},
		{
			name:   "add without finalizers",
			seen:   nil,
			now:    nil,
			change: func(p *jsonpatch.Patch, o *unstructured.Unstructured) bool { Add(p, o, "h"); return true },
			want:   []string{"tether.dev/h"},
		},
		{
			name:   "remove keeps the rest in order",
			seen:   []string{"example.com/x", "tether.dev/h", "tether.dev/other"},
			now:    []string{"example.com/x", "tether.dev/h", "tether.dev/other"},
			change: func(p *jsonpatch.Patch, o *unstructured.Unstructured) bool { return Remove(p, o, "h") },
			want:   []string{"example.com/x", "tether.dev/other"},
		},
		{
			name:   "add against a stale list fails its test",
			seen:   []string{"example.com/x"},
			now:    []string{"example.com/x", "example.com/y"},
			change: func(p *jsonpatch.Patch, o *unstructured.Unstructured) bool { Add(p, o, "h"); return true },
		},
		{
			name:   "add against a list another controller removed from fails its test",
			seen:   []string{"example.com/x", "example.com/y"},
			now:    []string{"example.com/y"},
			change: func(p *jsonpatch.Patch, o *unstructured.Unstructured) bool { Add(p, o, "h"); return true },
		},
		{
			name:   "remove after an earlier element went fails its test",
			seen:   []string{"example.com/x", "tether.dev/h", "example.com/y"},
			now:    []string{"tether.dev/h", "example.com/y"},
			change: func(p *jsonpatch.Patch, o *unstructured.Unstructured) bool { return Remove(p, o, "h") },
		},
		{
			name:   "remove after an element was inserted before it fails its test",
			seen:   []string{"tether.dev/h", "example.com/y"},
			now:    []string{"example.com/x", "tether.dev/h", "example.com/y"},
			change: func(p *jsonpatch.Patch, o *unstructured.Unstructured) bool { return Remove(p, o, "h") },
		},
		{
			name:   "remove of a hold that is already gone fails",
			seen:   []string{"tether.dev/h"},
			now:    nil,
			change: func(p *jsonpatch.Patch, o *unstructured.Unstructured) bool { return Remove(p, o, "h") },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p jsonpatch.Patch
			if !tt.change(&p, object(tt.seen...)) {
				t.Fatal("nothing to change")
			}
			got, err := apply(t, object(tt.now...), p)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("patch %s applied to a changed list: %v", patchJSON(t, p), got.GetFinalizers())
				}
				return
			}
			if err != nil {
				t.Fatalf("apply %s: %v", patchJSON(t, p), err)
			}
			if !reflect.DeepEqual(got.GetFinalizers(), tt.want) {
				t.Errorf("finalizers %q, want %q", got.GetFinalizers(), tt.want)
			}
		})
	}
}

func TestAddThenRemoveRoundTrips(t *testing.T) {
	obj := object("example.com/x")
	var add jsonpatch.Patch
	Add(&add, obj, "h")
	held, err := apply(t, obj, add)
	if err != nil {
		t.Fatal(err)
	}
	if !Has(held, "h") {
		t.Fatalf("not held after Add: %v", held.GetFinalizers())
	}
	var again jsonpatch.Patch
	if Add(&again, held, "h") || len(again) != 0 {
		t.Errorf("second Add produced %s", patchJSON(t, again))
	}
	var rm jsonpatch.Patch
	Remove(&rm, held, "h")
	released, err := apply(t, held, rm)
	if err != nil {
		t.Fatal(err)
	}
	if Has(released, "h") || !reflect.DeepEqual(released.GetFinalizers(), []string{"example.com/x"}) {
		t.Errorf("finalizers after Remove: %v", released.GetFinalizers())
	}
}
