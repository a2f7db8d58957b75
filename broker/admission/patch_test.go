package admission

import (
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestPatchCheckedAgainstObject(t *testing.T) {
	create := &admissionv1.AdmissionRequest{Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(testObject)}}
	del := &admissionv1.AdmissionRequest{Operation: admissionv1.Delete, OldObject: runtime.RawExtension{Raw: []byte(testObject)}}
	// Each copy doubles /data/a; a few dozen would take all memory.
	doubling := `[{"op":"add","path":"/data/a","value":"` + strings.Repeat("x", 1000) + `"}`
	for i := range 30 {
		doubling += fmt.Sprintf(`,{"op":"copy","from":"/data","path":"/data/c%d"}`, i)
	}
	doubling += "]"
	tooManyCopies := `[` + strings.Repeat(`{"op":"copy","from":"/data/a","path":"/data/b"},`, maxPatchCopies) + `{"op":"copy","from":"/data/a","path":"/data/b"}]`
	for _, c := range []struct {
		name, patch string
		req         *admissionv1.AdmissionRequest
		want        string // the patch returned, or
		wantErr     string // a substring of the error
	}{
		{name: "no patch", req: create},
		{name: "empty list", patch: " [ ] ", req: create},
		{name: "adds a label", patch: `[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]`, req: create,
			want: `[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]`},
		{name: "copies within bounds", patch: `[{"op":"copy","from":"/data/a","path":"/data/b"}]`, req: create,
			want: `[{"op":"copy","from":"/data/a","path":"/data/b"}]`},
		{name: "a test that fails", patch: `[{"op":"test","path":"/data/a","value":"z"}]`, req: create, wantErr: "does not apply"},
		{name: "an unknown operation", patch: `[{"op":"frobnicate","path":"/data/a"}]`, req: create, wantErr: `unknown op "frobnicate"`},
		{name: "a replace without a value", patch: `[{"op":"replace","path":"/data/a"}]`, req: create, wantErr: "(replace /data/a) has no value"},
		{name: "a replace of the whole object", patch: `[{"op":"replace","path":""}]`, req: create, wantErr: "is on the whole object"},
		{name: "a copy of the whole object", patch: `[{"op":"copy","from":"","path":"/data/x"}]`, req: create, wantErr: "from the whole object"},
		{name: "changes the kind", patch: `[{"op":"replace","path":"/kind","value":"Secret"}]`, req: create,
			wantErr: `changes kind from "ConfigMap" to "Secret"`},
		{name: "moves the namespace", patch: `[{"op":"remove","path":"/metadata/namespace"}]`, req: create,
			wantErr: `changes metadata.namespace from "ns" to ""`},
		{name: "changes apiVersion", patch: `[{"op":"replace","path":"/apiVersion","value":"v2"}]`, req: create,
			wantErr: `changes apiVersion from "v1" to "v2"`},
		{name: "breaks metadata", patch: `[{"op":"replace","path":"/metadata","value":"x"}]`, req: create,
			wantErr: "the patched object: not a Kubernetes object"},
		{name: "a delete has no object", patch: `[{"op":"add","path":"/data/b","value":"c"}]`, req: del,
			wantErr: "a DELETE request has no object to patch"},
		{name: "copies that double the object", patch: doubling, req: create, wantErr: "larger than 65536 bytes"},
		{name: "too many copies", patch: tooManyCopies, req: create, wantErr: "65 copy operations, more than the 64 allowed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := checkPatch(c.req, []byte(c.patch), 64<<10)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %q, %v; want an error with %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}
