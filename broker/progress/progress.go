package progress

import (
	"crypto/sha256"
	"encoding/hex"
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

// Ours reports whether an annotation key is the broker's bookkeeping for
// some handler (its last-handled state or a stored result), so that one
// handler's bookkeeping never looks like a change to another, and no handler
// can write it. Other keys under tether.dev, such as the example handler's
// replicator.tether.dev/enabled, are ordinary annotations.
func Ours(key string) bool {
	prefix, name, ok := strings.Cut(key, "/")
	if !ok || (prefix != Domain && !strings.HasSuffix(prefix, "."+Domain)) {
		return false
	}
	return name == "last-handled" || strings.HasPrefix(name, "result.")
}

// ignoredAnnotations are written by tools on every apply and say nothing
// about the object's desired state.
var ignoredAnnotations = map[string]bool{
	"kubectl.kubernetes.io/last-applied-configuration": true,
}

// Essence is the part of an object whose change is an update: every
// top-level field except apiVersion, kind, status and metadata, plus the
// labels and the annotations that are not Tether's own. A Secret's values
// are replaced by their SHA-256, so that the last-handled annotation never
// copies secret material into metadata; a change still shows, by key.
func Essence(obj map[string]any) map[string]any {
	out := make(map[string]any, len(obj))
	secret := obj["kind"] == "Secret" && obj["apiVersion"] == "v1"
	for k, v := range obj {
		switch k {
		case "apiVersion", "kind", "status", "metadata":
			continue
		}
		if m, ok := v.(map[string]any); ok && secret && (k == "data" || k == "stringData") {
			v = hashValues(m)
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

// MaxRecorded bounds the last-handled annotation. Annotations share 256 KiB
// per object; a larger essence is recorded as its digest alone, which still
// tells changed from unchanged but gives updates no old side.
const MaxRecorded = 64 << 10

// digestKey marks an essence recorded as its digest.
const digestKey = "tether.dev/sha256"

func hashValues(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		sum := sha256.Sum256([]byte(fmt.Sprint(v)))
		out[k] = "sha256:" + hex.EncodeToString(sum[:])
	}
	return out
}

func digestOf(essence map[string]any) string {
	b, _ := json.Marshal(normalize(essence))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Encode renders an essence for the last-handled annotation: as JSON, or as
// its digest when the JSON would be larger than MaxRecorded.
func Encode(essence map[string]any) (string, error) {
	b, err := json.Marshal(essence) // map keys are sorted: stable output
	if err != nil {
		return "", fmt.Errorf("encoding last-handled state: %w", err)
	}
	if len(b) > MaxRecorded {
		b, err = json.Marshal(map[string]any{digestKey: digestOf(essence)})
		if err != nil {
			return "", fmt.Errorf("encoding last-handled digest: %w", err)
		}
	}
	return string(b), nil
}

// Recorded turns an essence into what Encode records of it, so that the
// broker's memory compares like the annotation.
func Recorded(essence map[string]any) map[string]any {
	if b, err := json.Marshal(essence); err == nil && len(b) > MaxRecorded {
		return map[string]any{digestKey: digestOf(essence)}
	}
	return essence
}

// Digested reports whether a recorded essence is only a digest.
func Digested(recorded map[string]any) bool {
	_, ok := recorded[digestKey]
	return ok && len(recorded) == 1
}

// Equal tells whether the recorded last-handled state a matches the
// essence b.
func Equal(a, b map[string]any) bool {
	if Digested(a) {
		return a[digestKey] == digestOf(b)
	}
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
