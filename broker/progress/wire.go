package progress

import (
	"encoding/json"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// DiffProto is entries as an update delivery carries them (Delivery.diff).
func DiffProto(entries []Entry) []*tetherv1.DiffEntry {
	out := make([]*tetherv1.DiffEntry, 0, len(entries))
	for _, e := range entries {
		d := &tetherv1.DiffEntry{Path: e.Path}
		switch e.Op {
		case Add:
			d.Operation = tetherv1.DiffEntry_OPERATION_ADD
			d.NewValue = jsonOf(e.New)
		case Remove:
			d.Operation = tetherv1.DiffEntry_OPERATION_REMOVE
			d.OldValue = jsonOf(e.Old)
		default:
			d.Operation = tetherv1.DiffEntry_OPERATION_CHANGE
			d.OldValue, d.NewValue = jsonOf(e.Old), jsonOf(e.New)
		}
		out = append(out, d)
	}
	return out
}

// jsonOf encodes a value decoded from JSON, which cannot fail; nil is nil.
func jsonOf(v any) []byte {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}
