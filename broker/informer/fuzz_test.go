package informer

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzFromJSON: whatever the API server sends, Read never panics, and
// what it reads is what decoding the object would give: the same object
// without managedFields, the same metadata fields.
func FuzzFromJSON(f *testing.F) {
	f.Add([]byte(served))
	f.Add([]byte(`{"metadata":{"managedFields":[],"name":"a"},"x":[1,{"y":"}"}]}`))
	f.Add([]byte(`{"metadata":{"name":"a","managedFields":1,"managedFields":2}}`))
	f.Add([]byte(`{"metadata":{"managedFields":null},"metadata":{"name":"b\u0041","uid":null}}`))
	f.Add([]byte(` { "metadata" : { "name" : "x" , "managedFields" : { } } } `))
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := Read(data)
		var want map[string]any
		if json.Unmarshal(data, &want) != nil {
			if err == nil {
				t.Fatalf("%q read, but it does not decode as an object", data)
			}
			return
		}
		if want == nil {
			return // null: not an object, an error or not
		}
		meta, _ := want["metadata"].(map[string]any)
		if want["metadata"] != nil && meta == nil {
			return // metadata that is not an object: an error or not, no panic
		}
		str := func(k string) (string, bool) {
			v, ok := meta[k].(string)
			return v, ok || meta[k] == nil
		}
		ns, ok1 := str("namespace")
		name, ok2 := str("name")
		uid, ok3 := str("uid")
		rv, ok4 := str("resourceVersion")
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return // a field of the wrong type
		}
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		if o.Namespace != ns || o.Name != name || string(o.UID) != uid || o.ResourceVersion != rv {
			t.Errorf("%q: fields %+v, want %q %q %q %q", data, o, ns, name, uid, rv)
		}
		if _, deleting := meta["deletionTimestamp"]; o.Deleting != (deleting && meta["deletionTimestamp"] != nil) {
			t.Errorf("%q: deleting %v", data, o.Deleting)
		}
		delete(meta, "managedFields")
		var got map[string]any
		if err := json.Unmarshal(o.Raw, &got); err != nil {
			t.Fatalf("%q cached as %q, which does not decode: %v", data, o.Raw, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q cached as %q", data, o.Raw)
		}
	})
}
