package dispatch

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/resource"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// TestResultsAreWrittenWhereTheBindingStoresThem renders what OK acks ask
// to write, as the broker sends it: the object's JSON patch and, for a
// resource with a status subresource, the merge patch of status.
func TestResultsAreWrittenWhereTheBindingStoresThem(t *testing.T) {
	inAnnotation := &binding.Binding{ID: "create-fn"}
	inStatus := &binding.Binding{ID: "create-fn", Results: binding.Results{Status: true, Key: "create_fn"}}
	kopfKey := &binding.Binding{ID: "field-fn", Results: binding.Results{Status: true, Key: "Kex.fn/spec.x~y"}}
	type ack struct {
		b                     *binding.Binding
		patch, status, result string
	}
	tests := []struct {
		name      string
		acks      []ack
		hasStatus bool
		// objectPatch is the JSON patch after its uid and resourceVersion
		// tests; statusPatch the merge patch of the status subresource.
		objectPatch, statusPatch string
	}{
		{name: "in the annotation, as before", acks: []ack{{b: inAnnotation, result: `{"a":1}`}}, hasStatus: true,
			objectPatch: `[{"op":"add","path":"/metadata/annotations","value":{"h.tether.dev/result.create-fn":"{\"a\":1}"}}]`},
		{name: "an object in the status subresource", acks: []ack{{b: inStatus, result: `{"a":1}`}}, hasStatus: true,
			statusPatch: `{"status":{"create_fn":{"a":1}}}`},
		{name: "an object merged into what the key holds, without a subresource", acks: []ack{{b: inStatus, result: `{"a":1}`}},
			objectPatch: `[{"op":"add","path":"/status/create_fn/a","value":1}]`},
		{name: "a number replaces what the key holds", acks: []ack{{b: inStatus, result: `100`}},
			objectPatch: `[{"op":"add","path":"/status/create_fn","value":100}]`},
		{name: "a string in the subresource", acks: []ack{{b: inStatus, result: `"done"`}}, hasStatus: true,
			statusPatch: `{"status":{"create_fn":"done"}}`},
		{name: "null stores nothing", acks: []ack{{b: inStatus, result: `null`}}, hasStatus: true},
		{name: "after the handler's own status patch", hasStatus: true,
			acks:        []ack{{b: inStatus, status: `{"create_fn":{"a":0,"b":2},"phase":"Ready"}`, result: `{"a":1}`}},
			statusPatch: `{"status":{"create_fn":{"a":1,"b":2},"phase":"Ready"}}`},
		{name: "beside the patch, which goes with the object", hasStatus: true,
			acks:        []ack{{b: inStatus, patch: `{"spec":{"x":2},"status":{"phase":"Ready"}}`, result: `7`}},
			objectPatch: `[{"op":"add","path":"/spec/x","value":2}]`, statusPatch: `{"status":{"create_fn":7,"phase":"Ready"}}`},
		{name: "a key with dots, slashes and tildes is one key", acks: []ack{{b: kopfKey, result: `true`}},
			objectPatch: `[{"op":"add","path":"/status/Kex.fn~1spec.x~0y","value":true}]`},
		{name: "two bindings, one in each store", hasStatus: true,
			acks:        []ack{{b: inAnnotation, result: `1`}, {b: kopfKey, result: `2`}},
			objectPatch: `[{"op":"add","path":"/metadata/annotations","value":{"h.tether.dev/result.create-fn":"1"}}]`,
			statusPatch: `{"status":{"Kex.fn/spec.x~y":2}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a accumulated
			for _, k := range tt.acks {
				ack := &tetherv1.Ack{Patch: []byte(k.patch), StatusPatch: []byte(k.status), Result: []byte(k.result)}
				if err := a.add(k.b, ack, nil); err != nil {
					t.Fatalf("add: %v", err)
				}
			}
			res := &resource.Resource{HasStatus: tt.hasStatus}
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "test.tether.dev/v1", "kind": "Widget",
				"metadata": map[string]any{"name": "w", "namespace": "ns", "uid": "u", "resourceVersion": "5"},
				"spec":     map[string]any{"x": int64(1)},
				"status":   map[string]any{"create_fn": map[string]any{"b": int64(2)}},
			}}
			w := a.write("h")
			ow := &objectWriter{handlerName: "h"}
			p, _, err := ow.buildPatch(obj, objectMerge(&object{res: res}, w), w)
			if err != nil {
				t.Fatalf("buildPatch: %v", err)
			}
			objectPatch := ""
			if !p.Empty() {
				data, err := p.JSON()
				if err != nil {
					t.Fatal(err)
				}
				objectPatch = string(data)
				// The uid test always leads, then the resourceVersion's
				// when the patch is guarded.
				objectPatch = strings.TrimPrefix(objectPatch, `[{"op":"test","path":"/metadata/uid","value":"u"},`)
				objectPatch = "[" + strings.TrimPrefix(objectPatch, `{"op":"test","path":"/metadata/resourceVersion","value":"5"},`)
			}
			if objectPatch != tt.objectPatch {
				t.Errorf("object patch:\n got %s\nwant %s", objectPatch, tt.objectPatch)
			}
			statusPatch := ""
			if tt.hasStatus && len(w.status) > 0 {
				data, err := json.Marshal(map[string]any{"status": w.status})
				if err != nil {
					t.Fatal(err)
				}
				statusPatch = string(data)
			}
			if statusPatch != tt.statusPatch {
				t.Errorf("status patch:\n got %s\nwant %s", statusPatch, tt.statusPatch)
			}
		})
	}
}

// TestAResultTheBrokerCannotStoreRefusesTheAck: a result that is not JSON
// or is too large takes nothing of the ack, wherever it would be stored.
func TestAResultTheBrokerCannotStoreRefusesTheAck(t *testing.T) {
	for _, b := range []*binding.Binding{{ID: "a"}, {ID: "s", Results: binding.Results{Status: true, Key: "s"}}} {
		for _, r := range []string{`{`, `"` + strings.Repeat("x", tetherv1.MaxResultBytes) + `"`} {
			var a accumulated
			err := a.add(b, &tetherv1.Ack{StatusPatch: []byte(`{"phase":"Ready"}`), Result: []byte(r)}, nil)
			if err == nil || !a.empty() {
				t.Errorf("%+v, a result of %d bytes: error %v, empty %v; want an error and nothing taken", b.Results, len(r), err, a.empty())
			}
		}
	}
}
