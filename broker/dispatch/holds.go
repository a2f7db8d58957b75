package dispatch

import (
	"context"
	"fmt"
	"github.com/tether-dev/tether/broker/hold"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/metrics"
)

// This file gathers the inputs of contract.Decide from a handler's state
// and turns its releases into writes. The decisions themselves are
// contract's.

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
func (r *reconciler) releaseWrite(rule contract.Rule) *write {
	w := &write{removeHold: true, release: releaseReasons[rule]}
	grace, absentAfter := r.presence.limits()
	var msg string
	switch rule {
	case contract.RuleAbsent:
		msg = fmt.Sprintf("handler %q has had no instance connected for longer than its grace of %v: released (rule 3c)", r.name, grace)
	case contract.RuleLongAbsent:
		msg = fmt.Sprintf("handler %q has been absent for longer than %v: hold stripped until it returns (rule 3d)", r.name, absentAfter)
	case contract.RuleNoLongerMatching:
		msg = fmt.Sprintf("handler %q no longer has a binding that holds this object: released (rule 3e)", r.name)
	}
	if msg != "" {
		w.landed = &note{reason: "HoldReleased", message: msg}
	}
	return w
}

// deletionWork says where the handler's deletion work on o stands: the
// delete bindings that match obj, and the daemons stopped for it.
func (r *reconciler) deletionWork(o *object, obj *unstructured.Unstructured) contract.Work {
	gaveUp := false
	for _, b := range r.bindingsOf(o) {
		if b.Kind != binding.Delete || !r.matches(b, obj, nil) {
			continue
		}
		if !o.work.done[b.ID] {
			return contract.Pending
		}
		gaveUp = gaveUp || o.work.gaveUp[b.ID]
	}
	switch {
	case o.daemonTimedOut:
		return contract.TimedOut
	case gaveUp:
		return contract.GaveUp
	}
	return contract.Acked
}

// absent handles a live object while the handler is absent past its
// grace: nothing is delivered, and once it is absent past
// absent_release_after the hold is stripped (rule 3d), paced by the release
// limiter, to be added again on return. Objects being deleted are
// deletion's.
func (r *reconciler) absent(ctx context.Context, o *object, obj *unstructured.Unstructured, p contract.Presence) result {
	held := hold.Has(obj, r.name)
	dec := contract.Decide(contract.Object{Held: held, Policy: r.policy(r.bindingsOf(o), obj)}, p)
	if dec.Action != contract.Release {
		return goOn
	}
	if dec.Rule == contract.RuleLongAbsent {
		// Waiting for the turn frees the worker (see WriteLimiter): releases
		// of objects being deleted must not queue behind these.
		if wait := r.writer.releaseTurn(o); wait > 0 {
			return lookAgainIn(wait)
		}
	}
	return r.write(ctx, o, r.releaseWrite(dec.Rule))
}

// decideAgain asks the contract again about the hold that w, a write left
// pending by an earlier pass, adds or releases: it is made on the state
// the pass works on now, and the hold may no longer be needed (relabelled,
// the handler past its grace) or its release no longer allowed (the
// handler is back). The hold's part of w goes when the contract no longer
// says so, and a release names the rule that allows it now; it reports
// whether anything of w is left to write.
func (r *reconciler) decideAgain(o *object, w *write, p contract.Presence) bool {
	if !w.addHold && !w.removeHold {
		return true
	}
	obj := o.decoded()
	state := contract.Object{Deleting: o.cur.Deleting, Held: hold.Has(obj, r.name), Policy: r.policy(r.bindingsOf(o), obj)}
	if state.Deleting {
		state.Work = r.deletionWork(o, obj)
	}
	dec := contract.Decide(state, p)
	if w.addHold && dec.Action != contract.Add {
		w.addHold, w.waiting = false, nil
	}
	switch {
	case w.removeHold && dec.Action != contract.Release:
		w.removeHold, w.release, w.landed, w.waiting = false, "", nil, nil
	case w.removeHold:
		// The Event and the metric name the rule that applies now.
		now := r.releaseWrite(dec.Rule)
		w.release, w.landed = now.release, now.landed
	}
	return !w.empty()
}
