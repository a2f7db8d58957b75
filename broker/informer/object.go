package informer

import (
	"encoding/json"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Object is what a cache keeps of one object: its JSON, which is what a
// delivery sends anyway, and the few fields the cache and the dispatcher
// read on every notification. Decoded, an object takes three to four times
// the bytes of its JSON (a map per level, an interface per value); the
// dispatcher decodes it for the one pass that needs the fields and lets the
// decoded form go.
//
// An Object is immutable: Raw is never written after Encode.
type Object struct {
	Namespace, Name string
	UID             types.UID
	ResourceVersion string
	// Deleting: the object has a deletionTimestamp.
	Deleting bool
	// Raw is the object's JSON without metadata.managedFields.
	Raw []byte

	// initialEventsEnd marks the bookmark that ends a watch list's initial
	// events (it has no Raw): the reflector reads it as an annotation.
	initialEventsEnd bool
}

var _ runtime.Object = (*Object)(nil)

// Encode makes the cached form of u, without its managedFields. u is not
// changed.
func Encode(u *unstructured.Unstructured) (*Object, error) {
	m := u.Object
	if meta, ok := m["metadata"].(map[string]any); ok {
		if _, ok := meta["managedFields"]; ok {
			m = shallowWithout(m, meta)
		}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &Object{
		Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(),
		ResourceVersion: u.GetResourceVersion(), Deleting: u.GetDeletionTimestamp() != nil, Raw: raw,
	}, nil
}

// shallowWithout copies the two top levels of m that change, leaving out
// managedFields; the values below are shared, not copied.
func shallowWithout(m, meta map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	md := make(map[string]any, len(meta))
	for k, v := range meta {
		if k != "managedFields" {
			md[k] = v
		}
	}
	out["metadata"] = md
	return out
}

// Decode returns a fresh decoded copy of the object, numbers as int64 or
// float64 as in every unstructured object; the caller may change it.
func (o *Object) Decode() (*unstructured.Unstructured, error) {
	var m map[string]any
	if err := utiljson.Unmarshal(o.Raw, &m); err != nil {
		return nil, fmt.Errorf("decoding %s/%s from the cache: %w", o.Namespace, o.Name, err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// NewerThan reports whether o's resourceVersion is at or after p's.
// Resource versions are opaque, but etcd's are integers; when either is
// not, o counts as newer so that the latest notification wins.
func (o *Object) NewerThan(p *Object) bool {
	x, err1 := strconv.ParseUint(o.ResourceVersion, 10, 64)
	y, err2 := strconv.ParseUint(p.ResourceVersion, 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	return x >= y
}

// GetObjectMeta gives the cache's key function the name and namespace.
func (o *Object) GetObjectMeta() metav1.Object {
	m := &metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion}
	if o.initialEventsEnd {
		m.Annotations = map[string]string{initialEventsEnd: "true"}
	}
	return m
}

// GetObjectKind is empty: the kind is the informer's, and in Raw.
func (o *Object) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies the fields; Raw is shared, since it never changes.
func (o *Object) DeepCopyObject() runtime.Object {
	c := *o
	return &c
}

// Size is the bytes the object's JSON takes.
func (o *Object) Size() int { return len(o.Raw) }
