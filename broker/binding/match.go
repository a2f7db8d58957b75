package binding

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// Matches reports whether obj passes every filter of b. old is the
// last-handled state (may be nil), visible to CEL as oldObject. An error
// comes only from evaluating CEL; the object then does not match.
func (b *Binding) Matches(obj *unstructured.Unstructured, old map[string]any) (bool, error) {
	if !b.InNamespace(obj.GetNamespace()) {
		return false, nil
	}
	if b.Labels != nil && !b.Labels.Empty() && !b.Labels.Matches(labels.Set(obj.GetLabels())) {
		return false, nil
	}
	if b.Fields != nil && !b.Fields.Empty() && !b.Fields.Matches(fieldSet(obj, b.Fields)) {
		return false, nil
	}
	anns := obj.GetAnnotations()
	for _, f := range b.Annotations {
		v, ok := anns[f.Key]
		switch {
		case f.Op == AnnotationPresent && !ok,
			f.Op == AnnotationAbsent && ok,
			f.Op == AnnotationEquals && (!ok || v != f.Value):
			return false, nil
		}
	}
	if b.When != nil {
		return b.When.Eval(obj.Object, old)
	}
	return true, nil
}

// InNamespace reports whether b's namespace filter lets an object of
// namespace ns through: the one filter Matches applies that needs nothing
// else of the object.
func (b *Binding) InNamespace(ns string) bool {
	return len(b.Namespaces) == 0 || slices.Contains(b.Namespaces, ns)
}

// ReadsObject reports whether Matches reads more of an object than its
// namespace: labels, fields, annotations or CEL.
func (b *Binding) ReadsObject() bool {
	return (b.Labels != nil && !b.Labels.Empty()) || (b.Fields != nil && !b.Fields.Empty()) ||
		len(b.Annotations) > 0 || b.When != nil
}

// fieldSet collects the fields a selector asks about from obj, rendered as
// the API server renders field selector values.
func fieldSet(obj *unstructured.Unstructured, sel fields.Selector) fields.Set {
	set := fields.Set{}
	for _, req := range sel.Requirements() {
		path := strings.Split(req.Field, ".")
		v, found, err := unstructured.NestedFieldNoCopy(obj.Object, path...)
		if err != nil || !found || v == nil {
			set[req.Field] = ""
			continue
		}
		set[req.Field] = fmt.Sprint(v)
	}
	return set
}
