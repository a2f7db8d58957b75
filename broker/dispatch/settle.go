package dispatch

import (
	"encoding/json"
	"maps"

	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/progress"
)

// written is the API server's answer to a pass's write, and what the pass
// expected of it.
type written struct {
	answer *informer.Object
	// after is the object the write was built against, with the write's
	// changes made; nil when the write tested the resourceVersion, so
	// that its answer holds its changes alone.
	after map[string]any
}

// settles is the resourceVersion of the answer when the pass may settle
// it; "" when there is no answer, or another's change came back in it.
// The comparison decodes the answer, so it is made only here, for the
// passes that settle, not for every write.
func (w written) settles() string {
	if w.answer == nil || (w.after != nil && !ownAnswer(w.after, w.answer)) {
		return ""
	}
	return w.answer.ResourceVersion
}

// ownAnswer reports whether out, the API server's answer to a write, is
// after (the object the write was built against, with the write's changes
// made) and nothing else: no one's change landed before the write did.
// Only then may the pass settle the answer. A patch that does not test the
// resourceVersion lands on the object as it is by then, so a change a user
// made while the pass delivered comes back in the answer; settled, that
// change would never be handled. A false answer costs one more pass.
func ownAnswer(after map[string]any, out *informer.Object) bool {
	if out == nil {
		return false
	}
	got, err := out.Decode()
	if err != nil {
		return false
	}
	a, err1 := json.Marshal(settleForm(got.Object))
	b, err2 := json.Marshal(settleForm(after))
	return err1 == nil && err2 == nil && string(a) == string(b)
}

// settledAway are the fields of metadata that every write or hold changes
// and no binding decides on.
var settledAway = []string{"resourceVersion", "managedFields", "generation", "finalizers"}

// settleForm is obj without what the API server or the holds change on
// every write (settledAway) and without Tether's own annotations, for
// ownAnswer to compare. obj is not changed.
func settleForm(obj map[string]any) map[string]any {
	out := maps.Clone(obj)
	md, _ := obj["metadata"].(map[string]any)
	md = maps.Clone(md)
	for _, k := range settledAway {
		delete(md, k)
	}
	if anns, ok := md["annotations"].(map[string]any); ok {
		kept := make(map[string]any, len(anns))
		for k, v := range anns {
			if !progress.Ours(k) {
				kept[k] = v
			}
		}
		delete(md, "annotations")
		if len(kept) > 0 {
			md["annotations"] = kept
		}
	}
	out["metadata"] = md
	return out
}
