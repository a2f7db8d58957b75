package dispatch

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/metrics"
)

// This file gathers the inputs of contract.Decide from a runtime's state
// and turns its releases into writes. The decisions themselves are
// contract's.

// policy is the strongest finalizer policy among bindings that match obj
// and hold it.
func (rt *runtime) policy(bindings []*binding.Binding, obj *unstructured.Unstructured) contract.Policy {
	p := contract.NoHold
	for _, b := range bindings {
		if !b.Holds() || !rt.matches(b, obj, nil) {
			continue
		}
		if b.Policy == binding.PolicyStrict {
			return contract.Strict
		}
		p = contract.Hold
	}
	return p
}

// releaseReasons name each rule's release in metrics.
var releaseReasons = map[contract.Rule]string{
	contract.RuleAcked:            metrics.ReleaseDone,
	contract.RuleTimeout:          metrics.ReleaseDaemonTimeout,
	contract.RuleAbsent:           metrics.ReleaseAbsent,
	contract.RuleLongAbsent:       metrics.ReleaseLongAbsent,
	contract.RuleNoLongerMatching: metrics.ReleaseNoLongerMatching,
}

// releaseWrite releases the handler's hold for rule, with an Event naming
// the rule where the release is not the plain end of the handler's work.
func (rt *runtime) releaseWrite(rule contract.Rule) *write {
	w := &write{removeHold: true, release: releaseReasons[rule]}
	rt.mu.Lock()
	grace, absentAfter := rt.grace, rt.absentAfter
	rt.mu.Unlock()
	var msg string
	switch rule {
	case contract.RuleAbsent:
		msg = fmt.Sprintf("handler %q has had no instance connected for longer than its grace of %v: released (rule 3c)", rt.name, grace)
	case contract.RuleLongAbsent:
		msg = fmt.Sprintf("handler %q has been absent for longer than %v: hold stripped until it returns (rule 3d)", rt.name, absentAfter)
	case contract.RuleNoLongerMatching:
		msg = fmt.Sprintf("handler %q no longer has a binding that holds this object: released (rule 3e)", rt.name)
	}
	if msg != "" {
		w.landed = &note{reason: "HoldReleased", message: msg}
	}
	return w
}

// deletionWork says where the handler's deletion work on o stands: the
// delete bindings that match obj, and the daemons stopped for it.
func (rt *runtime) deletionWork(o *object, obj *unstructured.Unstructured) contract.Work {
	gaveUp := false
	for _, b := range rt.byResource[o.res.GroupVersionResource] {
		if b.Kind != binding.Delete || !rt.matches(b, obj, nil) {
			continue
		}
		if !o.done[b.ID] {
			return contract.Pending
		}
		gaveUp = gaveUp || o.gaveUp[b.ID]
	}
	switch {
	case o.daemonTimedOut:
		return contract.TimedOut
	case gaveUp:
		return contract.GaveUp
	}
	return contract.Acked
}
