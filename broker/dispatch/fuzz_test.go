package dispatch

import (
	"encoding/json"
	"testing"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/jsonpatch"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// FuzzAckWrite feeds what a handler's OK ack may carry (patch, status
// patch, result, stored in an annotation and in status) through what the broker does with it: take it, compose
// it with another ack's, and render the JSON patch against an object. No
// input may crash the broker, and what it takes must be a write it can
// render.
func FuzzAckWrite(f *testing.F) {
	f.Add([]byte(`{"metadata":{"labels":{"a":"b"}},"spec":{"x":1}}`), []byte(`{"phase":"Ready"}`), []byte(`{"copies":2}`))
	f.Add([]byte(`{"status":{"a":null}}`), []byte(``), []byte(`"s"`))
	f.Add([]byte(`{"metadata":{"finalizers":["x"]}}`), []byte(`[]`), []byte(`{`))
	f.Add([]byte(`null`), []byte(`{"a":{"b":{"c":[1,2,{"d":null}]}}}`), []byte(`1e999`))
	f.Fuzz(func(t *testing.T, patch, status, result []byte) {
		var a accumulated
		ack := &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_OK, Patch: patch, StatusPatch: status, Result: result}
		if err := a.add(&binding.Binding{ID: "b"}, ack, nil); err != nil {
			return
		}
		inStatus := &binding.Binding{ID: "c", Results: binding.Results{Status: true, Key: "Kex.c/spec.x~y"}}
		if err := a.add(inStatus, ack, nil); err != nil {
			t.Fatalf("the same ack taken once is refused the second time: %v", err)
		}
		w := a.write("h")
		obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{
			"name": "x", "namespace": "ns", "uid": "u", "labels": map[string]any{"a": "old"},
		}, "spec": map[string]any{"x": 0}}
		// As for a resource without a status subresource: status goes
		// with the object.
		merge := jsonpatch.ComposeMerge(w.handlerPatch, map[string]any{"status": w.status})
		ops, _, err := jsonpatch.FromMergePatch(obj, merge)
		if err != nil {
			return // reported to the handler as an invalid patch
		}
		if _, err := json.Marshal(ops); err != nil {
			t.Fatalf("a rendered patch does not encode: %v", err)
		}
	})
}
