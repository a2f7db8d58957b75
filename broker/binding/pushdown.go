package binding

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Pushdown is the label selector that every binding of resource r among bs
// has: the requirements they share. The broker's informers send it to the
// API server, so that what no binding can match is neither listed nor
// cached; an object outside it matches none of the bindings of r, since
// each binding's selector holds all of its requirements. Admission bindings
// do not count (webhooks serve them, not informers). It is empty when a
// binding of r has no label selector or the bindings share no requirement.
func Pushdown(bs []*Binding, r schema.GroupVersionResource) labels.Selector {
	var common labels.Requirements
	first := true
	for _, b := range bs {
		if b.Kind.IsAdmission() || b.Resource.GroupVersionResource != r {
			continue
		}
		var reqs labels.Requirements
		if b.Labels != nil {
			reqs, _ = b.Labels.Requirements()
		}
		if first {
			common, first = reqs, false
			continue
		}
		kept := common[:0:0]
		for _, c := range common {
			for _, q := range reqs {
				if c.String() == q.String() {
					kept = append(kept, c)
					break
				}
			}
		}
		common = kept
	}
	return labels.NewSelector().Add(common...)
}
