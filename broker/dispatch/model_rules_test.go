package dispatch

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/hold"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// This file is the model test's reference: what it knows of each object
// from the steps it took, and the rules of "The contract" in
// docs/design.md judged against that, never against the broker's state.

// truth is what the model knows of one object (one UID).
type truth struct {
	name string
	uid  types.UID
	made int // its place in the order the model made objects
	// policies are what the labels of each of the object's states ask
	// for, by resourceVersion: a write is judged against the state the
	// broker decided on.
	policies map[string]contract.Policy
	// informed is the state the informer last told the controller of; nil
	// before the first. goneTold: its DELETED was told.
	informed *unstructured.Unstructured
	goneTold bool

	// The handler's answers to the object's delete bindings since its
	// deletion: answered OK or FAIL, and attempts that failed (RETRY, no
	// answer in time).
	delAnswered map[string]bool
	delFailed   map[string]int
	// finished: a create was answered (OK, FAIL) or its retries ran out;
	// finishedSize is spec.size in the last create or update finished so.
	// failed counts failed attempts by binding and spec.size (a change of
	// the spec is another cause, with its own retries).
	finished     bool
	finishedSize int64
	failed       map[string]int
}

func (tr *truth) String() string { return tr.name + "(" + string(tr.uid) + ")" }

// record notes obj as one of the object's states.
func (tr *truth) record(m *model, obj *unstructured.Unstructured) {
	tr.policies[obj.GetResourceVersion()] = m.policy(obj)
}

// matches reports whether binding b matches obj, by the model's own
// reading of its one selector (app=x on the bindings that have it).
func (m *model) matches(b *binding.Binding, obj *unstructured.Unstructured) bool {
	return !m.selective[b.ID] || obj.GetLabels()["app"] == "x"
}

// policy is the strongest policy of the delete bindings that hold obj
// (rule 2): NONE and non-matching bindings hold nothing.
func (m *model) policy(obj *unstructured.Unstructured) contract.Policy {
	p := contract.NoHold
	for _, b := range m.bindings {
		if b.Kind != binding.Delete || b.Policy == binding.PolicyNone || !m.matches(b, obj) {
			continue
		}
		if b.Policy == binding.PolicyStrict {
			return contract.Strict
		}
		p = contract.Hold
	}
	return p
}

// presence is where the handler stands, from when the model disconnected
// its instance: present, in its grace, absent, long absent.
func (m *model) presence() contract.Presence {
	now := m.p.clk.Now()
	switch {
	case m.connected:
		return contract.Present
	case now.Before(m.leftAt.Add(modelGrace)):
		return contract.InGrace
	case now.Before(m.leftAt.Add(modelAfter)):
		return contract.Absent
	}
	return contract.LongAbsent
}

// judgeWrite judges one write of the broker that is about to land,
// turning the object from cur into next: rules 1, 2, 3 and 4.
func (m *model) judgeWrite(tr *truth, cur, next *unstructured.Unstructured) {
	if fmt.Sprint(others(cur)) != fmt.Sprint(others(next)) {
		m.violate("4", "the broker's write changed another writer's finalizers: %v -> %v", others(cur), others(next))
	}
	if fmt.Sprint(cur.Object["spec"]) != fmt.Sprint(next.Object["spec"]) || fmt.Sprint(userLabels(cur)) != fmt.Sprint(userLabels(next)) ||
		deletedAt(cur) != deletedAt(next) {
		m.violate("4", "the broker's write changed what the user wrote: %v %v -> %v %v", cur.Object["spec"], userLabels(cur), next.Object["spec"], userLabels(next))
	}
	was, is := hold.Has(cur, "h"), hold.Has(next, "h")
	switch {
	case !was && is:
		m.seen["hold added"]++
		m.judgeAdd(m.decided(tr, cur))
	case was && !is:
		m.seen["release "+string(m.judgeRelease(tr, cur))]++
	}
}

// judgeAdd: rule 1, a hold only where a binding needs it, in the state
// the broker decided on, and for a handler that is there (the API server
// refuses one on an object being deleted); rule 2, NONE never holds.
func (m *model) judgeAdd(decided contract.Policy) {
	switch p := m.presence(); {
	case decided == contract.NoHold:
		m.violate("1", "a hold added where no binding holds (none matches, or all are NONE)")
	case p >= contract.Absent:
		m.violate("1", "a hold added while the handler is %v", p)
	}
}

// decided is the policy of the state of the object the pass under way
// works on: what the informer or the broker's last write showed it, which
// may be older than cur. The broker can act on nothing newer; a write built on an older
// state than the last one that matters is what the guards of rule 4 stop.
func (m *model) decided(tr *truth, cur *unstructured.Unstructured) contract.Policy {
	if p, ok := tr.policies[m.passRV(tr)]; ok {
		return p
	}
	return tr.policies[cur.GetResourceVersion()]
}

// judgeRelease: rule 3, a hold goes only by 3a to 3e (no daemons here, so
// not 3b; 3f is not the pass's), and rule 2, never a STRICT hold by
// absence. The policy is the state's the broker decided on (decided): a
// user may have relabelled the object since, and a release tests only the
// element.
func (m *model) judgeRelease(tr *truth, cur *unstructured.Unstructured) contract.Rule {
	pol, p := m.decided(tr, cur), m.presence()
	switch {
	case pol == contract.NoHold:
		return contract.RuleNoLongerMatching
	case cur.GetDeletionTimestamp() == nil:
		if pol == contract.Strict || p != contract.LongAbsent {
			m.violate("3", "a hold of policy %v released from a live object with the handler %v (3d needs long absent, and not STRICT)", pol, p)
		}
		return contract.RuleLongAbsent
	case m.deletionAcked(tr, cur, pol):
		return contract.RuleAcked
	case pol == contract.Hold && p >= contract.Absent:
		return contract.RuleAbsent
	case pol == contract.Strict && p >= contract.Absent:
		m.violate("2", "a STRICT hold released by absence (%v) without the handler's acknowledgement", p)
	default:
		m.violate("3", "a hold of policy %v released from an object being deleted before every delete binding answered (answered %v, failed %v), handler %v",
			pol, tr.delAnswered, tr.delFailed, p)
	}
	return "none"
}

// deletionAcked reports whether every delete binding that matches obj was
// answered since its deletion, or, under HOLD, ran out of retries (3a).
func (m *model) deletionAcked(tr *truth, obj *unstructured.Unstructured, pol contract.Policy) bool {
	for _, b := range m.bindings {
		if b.Kind != binding.Delete || !m.matches(b, obj) || tr.delAnswered[b.ID] {
			continue
		}
		if pol == contract.Strict || !b.Retry.Exhausted(tr.delFailed[b.ID]) {
			return false
		}
	}
	return true
}

// passRV is the resourceVersion of the state the pass under way decided
// on, "" when none is under way.
func (m *model) passRV(tr *truth) string {
	m.p.h.mu.Lock()
	o := m.p.h.objects[tr.uid]
	m.p.h.mu.Unlock()
	if o == nil || o.cur == nil {
		return ""
	}
	return o.cur.ResourceVersion
}

// heard records how the handler answered delivery d: rule 6's bookkeeping.
func (m *model) heard(d *tetherv1.Delivery, outcome string) {
	tr := m.byUID[types.UID(d.GetRef().GetUid())]
	if tr == nil {
		m.violate("5", "a delivery for %s, an object the model never made", d.GetRef().GetUid())
		return
	}
	b := m.binding(d.GetBindingId())
	answered := outcome == "OK" || outcome == "FAIL"
	if d.GetKind() == tetherv1.DeliveryKind_DELIVERY_KIND_DELETE {
		if answered {
			tr.delAnswered[b.ID] = true
		} else {
			tr.delFailed[b.ID]++
		}
		return
	}
	size := specSize(d.GetObject())
	key := fmt.Sprintf("%s/%d", b.ID, size)
	if !answered {
		tr.failed[key]++
		answered = b.Retry.Exhausted(tr.failed[key])
	}
	if answered {
		tr.finished, tr.finishedSize = true, size
	}
}

// checkSettled judges the objects once the queue is empty after a calm
// spell (every delivery answered OK, no fault): what must have happened by
// now, in time (rules 1, 3 and 6).
func (m *model) checkSettled() {
	p := m.presence()
	for _, tr := range m.truths() {
		obj := m.api.objs[tr.name]
		if obj == nil || obj.GetUID() != tr.uid {
			continue
		}
		pol, held := m.policy(obj), hold.Has(obj, "h")
		deleting := obj.GetDeletionTimestamp() != nil
		switch {
		case p == contract.Present && !deleting && !tr.finished:
			m.violate("6", "%s was never created for the handler: no create answered", tr)
		case p == contract.Present && !deleting && m.hasUpdate && tr.finishedSize != specSize(mustJSON(obj.Object)):
			m.violate("6", "%s is size %d, but the last update the handler finished was of size %d", tr, specSize(mustJSON(obj.Object)), tr.finishedSize)
		case p == contract.Present && !deleting && held != (pol != contract.NoHold):
			m.violate("1", "%s held %v, but its bindings ask for %v (rule 1, or 3e in time)", tr, held, pol)
		case p == contract.Present && deleting && held:
			m.violate("3", "%s is still held while being deleted, with the handler present and answering (3a in time)", tr)
		case p >= contract.Absent && deleting && held && pol != contract.Strict:
			m.violate("3", "%s is still held while being deleted, past the handler's grace (3c in time)", tr)
		case p == contract.LongAbsent && held && pol != contract.Strict:
			m.violate("3", "%s is still held with the handler long absent (3d in time)", tr)
		}
	}
}

// deletedAt is obj's deletionTimestamp, "" when it has none.
func deletedAt(obj *unstructured.Unstructured) string {
	if ts := obj.GetDeletionTimestamp(); ts != nil {
		return ts.UTC().String()
	}
	return ""
}

// modelTick is how long the clock moves when nothing is due.
const modelTick = 250 * time.Millisecond
