package progress

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Domain is the annotation domain every handler's keys live under.
const Domain = "tether.dev"

// LastHandledKey is the annotation that holds the handler's last-handled
// essence.
func LastHandledKey(handler string) string { return handler + "." + Domain + "/last-handled" }

// ResultKey is the annotation that holds a binding's stored result.
func ResultKey(handler, binding string) string {
	return handler + "." + Domain + "/result." + binding
}

// Ours reports whether an annotation key belongs to Tether (any handler), so
// that one handler's bookkeeping never looks like a change to another.
func Ours(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	return ok && (prefix == Domain || strings.HasSuffix(prefix, "."+Domain))
}

// ignoredAnnotations are written by tools on every apply and say nothing
// about the object's desired state.
var ignoredAnnotations = map[string]bool{
	"kubectl.kubernetes.io/last-applied-configuration": true,
}

// Essence is the part of an object whose change is an update: every
// top-level field except apiVersion, kind, status and metadata, plus the
// labels and the annotations that are not Tether's own.
func Essence(obj map[string]any) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		switch k {
		case "apiVersion", "kind", "status", "metadata":
			continue
		}
		out[k] = v
	}
	md, _ := obj["metadata"].(map[string]any)
	meta := map[string]any{}
	if labels, ok := md["labels"].(map[string]any); ok && len(labels) > 0 {
		meta["labels"] = labels
	}
	if anns, ok := md["annotations"].(map[string]any); ok {
		kept := map[string]any{}
		for k, v := range anns {
			if !Ours(k) && !ignoredAnnotations[k] {
				kept[k] = v
			}
		}
		if len(kept) > 0 {
			meta["annotations"] = kept
		}
	}
	if len(meta) > 0 {
		out["metadata"] = meta
	}
	return out
}

// LastHandled reads the handler's last-handled essence from obj. ok is false
// when the handler has not handled obj yet.
func LastHandled(obj *unstructured.Unstructured, handler string) (essence map[string]any, ok bool, err error) {
	raw, ok := obj.GetAnnotations()[LastHandledKey(handler)]
	if !ok {
		return nil, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &essence); err != nil {
		return nil, true, fmt.Errorf("reading %s: %w", LastHandledKey(handler), err)
	}
	if essence == nil {
		essence = map[string]any{}
	}
	return essence, true, nil
}

// Encode renders an essence for the last-handled annotation.
func Encode(essence map[string]any) (string, error) {
	b, err := json.Marshal(essence) // map keys are sorted: stable output
	if err != nil {
		return "", fmt.Errorf("encoding last-handled state: %w", err)
	}
	return string(b), nil
}

// Equal compares two essences as JSON values.
func Equal(a, b map[string]any) bool {
	return reflect.DeepEqual(normalize(a), normalize(b))
}

// normalize round-trips through JSON so that int64 and float64 numbers of
// the same value compare equal.
func normalize(v map[string]any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return v
	}
	return out
}

// Operation is the kind of one diff entry.
type Operation int

// The diff operations.
const (
	Add Operation = iota + 1
	Change
	Remove
)

// Entry is one change between two states. Lists are compared whole.
type Entry struct {
	Op       Operation
	Path     []string
	Old, New any
}

// Diff lists the changes from old to new, sorted by path.
func Diff(old, new map[string]any) []Entry {
	var out []Entry
	diff(&out, nil, normalize(old), normalize(new))
	return out
}

func diff(out *[]Entry, at []string, old, new any) {
	om, oldIsMap := old.(map[string]any)
	nm, newIsMap := new.(map[string]any)
	if oldIsMap && newIsMap {
		keys := map[string]bool{}
		for k := range om {
			keys[k] = true
		}
		for k := range nm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			path := append(append([]string(nil), at...), k)
			ov, inOld := om[k]
			nv, inNew := nm[k]
			switch {
			case !inOld:
				*out = append(*out, Entry{Op: Add, Path: path, New: nv})
			case !inNew:
				*out = append(*out, Entry{Op: Remove, Path: path, Old: ov})
			default:
				diff(out, path, ov, nv)
			}
		}
		return
	}
	if !reflect.DeepEqual(old, new) {
		*out = append(*out, Entry{Op: Change, Path: at, Old: old, New: new})
	}
}

// Field returns the value at a dotted path ("spec.replicas") in obj.
func Field(obj map[string]any, path []string) (any, bool) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Touches reports whether any entry changes the value at path or below it,
// or replaces a parent of it.
func Touches(entries []Entry, path []string) bool {
	for _, e := range entries {
		n := min(len(e.Path), len(path))
		if slices.Equal(e.Path[:n], path[:n]) {
			return true
		}
	}
	return false
}
