package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
)

// Bounds of a handler's patch. The API server refuses JSON patches of more
// than 10000 operations itself. A "copy" can double the object, so copies
// are applied one at a time and the object's size checked after each.
const (
	maxPatchOperations = 10000
	maxPatchCopies     = 64
)

// identity is what a mutation must not change.
type identity struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// checkPatch checks a mutating handler's patch against the request's
// object: it must be an RFC 6902 JSON patch that applies, and leave a JSON
// object of no more than maxSize bytes with the same apiVersion, kind, name
// and namespace. It returns the patch to send, nil when the patch changes
// nothing ("" or "[]").
func checkPatch(req *admissionv1.AdmissionRequest, raw []byte, maxSize int64) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, nil
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return nil, fmt.Errorf("not an RFC 6902 JSON patch: %w", err)
	}
	if len(patch) == 0 {
		return nil, nil
	}
	if len(patch) > maxPatchOperations {
		return nil, fmt.Errorf("the patch has %d operations, more than the %d allowed", len(patch), maxPatchOperations)
	}
	if err := wellFormed(patch); err != nil {
		return nil, fmt.Errorf("not an RFC 6902 JSON patch: %w", err)
	}
	obj := bytes.TrimSpace(req.Object.Raw)
	if len(obj) == 0 {
		return nil, fmt.Errorf("a %s request has no object to patch", req.Operation)
	}
	before, err := identityOf(obj)
	if err != nil {
		return nil, fmt.Errorf("the request's object: %w", err)
	}
	out, err := applyBounded(obj, patch, maxSize)
	if err != nil {
		return nil, fmt.Errorf("the patch does not apply to the object: %w", err)
	}
	after, err := identityOf(out)
	if err != nil {
		return nil, fmt.Errorf("the patched object: %w", err)
	}
	for _, f := range []struct{ field, was, is string }{
		{"apiVersion", before.APIVersion, after.APIVersion},
		{"kind", before.Kind, after.Kind},
		{"metadata.name", before.Metadata.Name, after.Metadata.Name},
		{"metadata.namespace", before.Metadata.Namespace, after.Metadata.Namespace},
	} {
		if f.was != f.is {
			return nil, fmt.Errorf("the patch changes %s from %q to %q", f.field, f.was, f.is)
		}
	}
	return raw, nil
}

// wellFormed checks what the JSON patch library takes on trust (it panics
// on some of it): every operation has a path below the root, and those that
// need one a value or a from. A mutation changes fields; it never replaces
// or moves the whole object.
func wellFormed(patch jsonpatch.Patch) error {
	for i, op := range patch {
		path, err := op.Path()
		if err != nil {
			return fmt.Errorf("operation %d: %w", i, err)
		}
		if path == "" {
			return fmt.Errorf("operation %d (%s) is on the whole object; patch its fields", i, op.Kind())
		}
		switch op.Kind() {
		case "add", "replace", "test":
			if _, ok := op["value"]; !ok {
				return fmt.Errorf("operation %d (%s %s) has no value", i, op.Kind(), path)
			}
		case "move", "copy":
			from, err := op.From()
			if err != nil {
				return fmt.Errorf("operation %d (%s %s): %w", i, op.Kind(), path, err)
			}
			if from == "" {
				return fmt.Errorf("operation %d (%s %s) is from the whole object; patch its fields", i, op.Kind(), path)
			}
		case "remove":
		default:
			return fmt.Errorf("operation %d: unknown op %q", i, op.Kind())
		}
	}
	return nil
}

// identityOf decodes doc's identity; doc must be a JSON object.
func identityOf(doc []byte) (identity, error) {
	var id identity
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(doc, &fields); err != nil || fields == nil {
		return id, errors.New("not a JSON object")
	}
	if err := json.Unmarshal(doc, &id); err != nil {
		return id, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	return id, nil
}

// applyBounded applies patch to doc, stopping when doc grows past maxSize.
// Only "copy" makes doc grow by more than the patch's own size, so runs of
// other operations are applied at once and copies one by one.
func applyBounded(doc []byte, patch jsonpatch.Patch, maxSize int64) ([]byte, error) {
	copies := 0
	for _, op := range patch {
		if op.Kind() == "copy" {
			copies++
		}
	}
	if copies > maxPatchCopies {
		return nil, fmt.Errorf("%d copy operations, more than the %d allowed", copies, maxPatchCopies)
	}
	var err error
	start := 0
	for i := range patch {
		if patch[i].Kind() != "copy" && i < len(patch)-1 {
			continue
		}
		if doc, err = patch[start : i+1].Apply(doc); err != nil {
			return nil, err
		}
		if int64(len(doc)) > maxSize {
			return nil, fmt.Errorf("the patched object is larger than %d bytes", maxSize)
		}
		start = i + 1
	}
	return doc, nil
}
