package sdk

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// patchOp is one RFC 6902 operation. Value is JSON already encoded, so that
// an add or replace of null still carries "value": null while a remove
// carries no value at all.
type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// jsonPatch returns the RFC 6902 JSON patch that turns the object from into
// the object to, or nil when they are equal. Objects are compared member by
// member; arrays and values of different types are replaced whole. Both
// sides must hold what decoding JSON gives (maps, slices, strings, int64 or
// float64, bools, nil); numbers compare by value, so 1 and 1.0 are equal.
func jsonPatch(from, to map[string]any) ([]byte, error) {
	var ops []patchOp
	if err := diffObjects("", from, to, &ops); err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

func diffObjects(path string, from, to map[string]any, ops *[]patchOp) error {
	keys := make([]string, 0, len(from)+len(to))
	for k := range from {
		keys = append(keys, k)
	}
	for k := range to {
		if _, ok := from[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := path + "/" + escapePointer(k)
		a, inFrom := from[k]
		b, inTo := to[k]
		var err error
		switch {
		case !inTo:
			*ops = append(*ops, patchOp{Op: "remove", Path: p})
		case !inFrom:
			err = addOp(ops, "add", p, b)
		default:
			err = diffValues(p, a, b, ops)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func diffValues(path string, from, to any, ops *[]patchOp) error {
	fm, fromIsObject := from.(map[string]any)
	tm, toIsObject := to.(map[string]any)
	if fromIsObject && toIsObject {
		return diffObjects(path, fm, tm, ops)
	}
	if equalJSON(from, to) {
		return nil
	}
	return addOp(ops, "replace", path, to)
}

func addOp(ops *[]patchOp, op, path string, value any) error {
	raw, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("encoding the value at %s: %w", path, err)
	}
	*ops = append(*ops, patchOp{Op: op, Path: path, Value: raw})
	return nil
}

// pointerEscaper escapes a member name for a JSON pointer (RFC 6901): "~"
// first becomes "~0", then "/" becomes "~1"; a Replacer does both in one
// pass, so a "~1" in a name stays distinct from a "/".
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapePointer(name string) string { return pointerEscaper.Replace(name) }

// equalJSON compares two decoded JSON values; numbers by value, whichever
// of int64 and float64 each side was decoded as.
func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equalJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case int64:
		switch y := b.(type) {
		case int64:
			return x == y
		case float64:
			return float64(x) == y
		}
		return false
	case float64:
		switch y := b.(type) {
		case int64:
			return x == float64(y)
		case float64:
			return x == y
		}
		return false
	default:
		return reflect.DeepEqual(a, b)
	}
}
