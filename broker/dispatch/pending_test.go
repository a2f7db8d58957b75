package dispatch

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/metrics"
)

// TestAPendingHoldIsDecidedAgain: a write left pending (a lost race, a
// wait for its turn) is made on the object's next state, and the hold it
// adds or releases was decided on an older one. What the contract says of
// the hold is asked again on the state it is made on: a hold is added only
// where a binding holds the object and for a handler that is there (rule
// 1), and released only by a rule that still applies (rule 3).
func TestAPendingHoldIsDecidedAgain(t *testing.T) {
	selective := bind("d", binding.Delete, binding.PolicyHold)
	selective.Labels = labels.SelectorFromSet(labels.Set{"app": "x"})
	handled := func(t *testing.T) *unstructured.Unstructured {
		return handledAs(t, sized("1", 1, "red"), sized("1", 1, "red"))
	}
	pending := func(w *write) func(p *passTest, o *object) {
		return func(p *passTest, o *object) {
			o.begin()
			o.work.pending = w
		}
	}
	for _, tc := range []passCase{
		{
			name: "not added once no binding holds the object", bindings: []*binding.Binding{selective},
			obj: handled, setup: pending(&write{addHold: true}),
		},
		{
			name: "not added once the handler is past its grace", bindings: []*binding.Binding{bind("d", binding.Delete, binding.PolicyHold)},
			obj: handled,
			setup: func(p *passTest, o *object) {
				pending(&write{addHold: true})(p, o)
				p.absent(false)
			},
		},
		{
			name: "added, with the rest of the write, while a binding still holds it", bindings: []*binding.Binding{bind("d", binding.Delete, binding.PolicyHold)},
			obj: handled, setup: pending(&write{addHold: true, merge: annotation("note", "kept")}), writes: []string{"+hold"},
		},
		{
			name: "the rest of the write is made without the hold", bindings: []*binding.Binding{selective},
			obj: handled, setup: pending(&write{addHold: true, merge: annotation("note", "kept")}), writes: []string{""},
		},
		{
			name: "a strip of a long-absent handler's hold is not made once it is back", bindings: []*binding.Binding{bind("d", binding.Delete, binding.PolicyHold)},
			obj:   func(t *testing.T) *unstructured.Unstructured { return held(handled(t)) },
			setup: pending(&write{removeHold: true, release: metrics.ReleaseLongAbsent}),
		},
		{
			name: "a release of an object being deleted is made once its work is acknowledged", bindings: []*binding.Binding{bind("d", binding.Delete, binding.PolicyHold)},
			obj: func(t *testing.T) *unstructured.Unstructured { return deleting(held(handled(t))) },
			setup: func(p *passTest, o *object) {
				pending(&write{removeHold: true})(p, o)
				o.markDone("d")
			},
			writes: []string{"-hold"},
		},
		{
			name: "a release for an absence the handler ended gives way to its delete bindings", bindings: []*binding.Binding{bind("d", binding.Delete, binding.PolicyHold)},
			obj:   func(t *testing.T) *unstructured.Unstructured { return deleting(held(handled(t))) },
			setup: pending(&write{removeHold: true, release: metrics.ReleaseAbsent}),
			sent:  []string{"delete d"}, writes: []string{"-hold"},
		},
	} {
		t.Run(tc.name, tc.run)
	}
}
