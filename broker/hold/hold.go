package hold

import (
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/jsonpatch"
)

// Prefix starts every finalizer the broker owns.
const Prefix = "tether.dev/"

// Finalizer is the hold of one handler.
func Finalizer(handler string) string { return Prefix + handler }

// Has reports whether obj carries the handler's hold.
func Has(obj *unstructured.Unstructured, handler string) bool {
	return index(obj.GetFinalizers(), Finalizer(handler)) >= 0
}

// Handlers lists the handlers that hold obj.
func Handlers(obj *unstructured.Unstructured) []string {
	var out []string
	for _, f := range obj.GetFinalizers() {
		if name, ok := strings.CutPrefix(f, Prefix); ok && name != "" {
			out = append(out, name)
		}
	}
	return out
}

// Add appends to p the operations that add the handler's hold to obj, as
// obj was seen. When obj has no finalizer list yet the list is added whole;
// then guard is true and the caller must also test the resourceVersion, since
// another controller may have created the list meanwhile.
func Add(p *jsonpatch.Patch, obj *unstructured.Unstructured, handler string) (guard bool) {
	return AddFinalizer(p, obj, Finalizer(handler))
}

// AddFinalizer is Add for any finalizer fin.
func AddFinalizer(p *jsonpatch.Patch, obj *unstructured.Unstructured, fin string) (guard bool) {
	list := obj.GetFinalizers()
	if index(list, fin) >= 0 {
		return false
	}
	if len(list) == 0 {
		p.Add("/metadata/finalizers", []string{fin})
		return true
	}
	p.Test("/metadata/finalizers", list)
	p.Add("/metadata/finalizers/-", fin)
	return false
}

// Remove appends to p the operations that remove the handler's hold from obj:
// a test that the element is still where it was seen, then its removal. It
// reports whether obj had the hold.
func Remove(p *jsonpatch.Patch, obj *unstructured.Unstructured, handler string) bool {
	return RemoveFinalizer(p, obj, Finalizer(handler))
}

// RemoveFinalizer is Remove for any finalizer fin.
func RemoveFinalizer(p *jsonpatch.Patch, obj *unstructured.Unstructured, fin string) bool {
	i := index(obj.GetFinalizers(), fin)
	if i < 0 {
		return false
	}
	path := "/metadata/finalizers/" + strconv.Itoa(i)
	p.Test(path, fin)
	p.Remove(path)
	return true
}

func index(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}
