package dispatch

import (
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/contract"
)

// The steps of the model test: what users, another controller, the
// informer, the clock and the handler's instance do.

// truths are the objects the model made and the informer has not told
// gone yet, in the order they were made: the model's own iterations are in
// order, so that a seed replays.
func (m *model) truths() []*truth {
	var all []*truth
	for _, tr := range m.byUID {
		if !tr.goneTold {
			all = append(all, tr)
		}
	}
	slices.SortFunc(all, func(a, b *truth) int { return a.made - b.made })
	return all
}

func (m *model) anyTruth() *truth {
	all := m.truths()
	if len(all) == 0 {
		return nil
	}
	return all[m.rng.IntN(len(all))]
}

// inform has the informer catch up with the object: its latest state, or
// its DELETED once it is gone; the controller's observe queues it.
func (m *model) inform(tr *truth) {
	if tr == nil || tr.goneTold {
		return
	}
	obj := m.api.objs[tr.name]
	switch {
	case obj != nil && obj.GetUID() == tr.uid:
		if tr.informed != nil && tr.informed.GetResourceVersion() == obj.GetResourceVersion() {
			return
		}
		typ := watchModified
		if tr.informed == nil {
			typ = watchAdded
		}
		tr.informed = obj.DeepCopy()
		m.logf("informer: %s %s rv %s", typ, tr, obj.GetResourceVersion())
		m.p.see(obj.DeepCopy(), typ, false)
	case tr.informed == nil:
		tr.goneTold = true // gone before the informer saw it
		return
	default:
		tr.goneTold = true
		m.logf("informer: DELETED %s", tr)
		m.p.see(tr.informed.DeepCopy(), watchDeleted, false)
	}
	m.q.Add(tr.uid)
}

// requeueAll is what the controller does when the handler's presence
// changes; initial, when the handler returned, makes it a resume.
func (m *model) requeueAll(initial bool) {
	for _, tr := range m.truths() {
		if tr.informed == nil {
			continue
		}
		m.p.see(tr.informed.DeepCopy(), watchModified, initial)
		m.q.Add(tr.uid)
	}
}

func (m *model) userCreates() {
	name := fmt.Sprintf("w%d", m.rng.IntN(modelNames))
	if m.api.objs[name] != nil {
		return
	}
	m.made++
	obj := widget("")
	obj.SetName(name)
	obj.SetUID(types.UID(fmt.Sprintf("uid-%d", m.made)))
	obj.Object["spec"] = map[string]any{"size": int64(1)}
	if m.rng.IntN(2) == 0 {
		obj.SetLabels(map[string]string{"app": "x"})
	}
	if m.rng.IntN(3) == 0 {
		obj.SetFinalizers([]string{modelForeign})
	}
	tr := &truth{name: name, uid: obj.GetUID(), made: m.made, policies: map[string]contract.Policy{},
		delAnswered: map[string]bool{}, delFailed: map[string]int{}, failed: map[string]int{}}
	m.objs[name], m.byUID[tr.uid] = tr, tr
	m.api.put(tr, obj)
	m.logf("user creates %s labels %v finalizers %v", tr, obj.GetLabels(), obj.GetFinalizers())
	m.maybeInform(tr)
}

// live is the object of name when it exists and is not being deleted; a
// random name when none is given.
func (m *model) live(name ...string) (*truth, *unstructured.Unstructured) {
	if len(name) == 0 {
		name = append(name, fmt.Sprintf("w%d", m.rng.IntN(modelNames)))
	}
	tr := m.objs[name[0]]
	if tr == nil {
		return nil, nil
	}
	obj := m.api.objs[tr.name]
	if obj == nil || obj.GetUID() != tr.uid || obj.GetDeletionTimestamp() != nil {
		return nil, nil
	}
	return tr, obj.DeepCopy()
}

func (m *model) maybeInform(tr *truth) {
	if m.rng.IntN(2) == 0 {
		m.inform(tr)
	}
}

func (m *model) userChanges() {
	if tr, obj := m.live(); tr != nil {
		obj.Object["spec"] = map[string]any{"size": specSize(mustJSON(obj.Object)) + 1}
		m.api.put(tr, obj)
		m.logf("user changes %s to size %d", tr, specSize(mustJSON(obj.Object)))
		m.maybeInform(tr)
	}
}

func (m *model) userRelabels() {
	if tr, obj := m.live(); tr != nil {
		ls := obj.GetLabels()
		if ls == nil {
			ls = map[string]string{}
		}
		if ls["app"] == "x" {
			delete(ls, "app")
		} else {
			ls["app"] = "x"
		}
		obj.SetLabels(ls)
		m.api.put(tr, obj)
		m.logf("user relabels %s: %v", tr, userLabels(obj))
		m.maybeInform(tr)
	}
}

func (m *model) userDeletes() {
	if tr, obj := m.live(); tr != nil {
		m.delete(tr, obj)
	}
}

// delete has the user delete obj, the current state of tr's object.
func (m *model) delete(tr *truth, obj *unstructured.Unstructured) {
	now := metav1.NewTime(m.p.clk.Now())
	obj.SetDeletionTimestamp(&now)
	m.logf("user deletes %s (finalizers %v)", tr, obj.GetFinalizers())
	m.api.put(tr, obj)
	m.maybeInform(tr)
}

// otherController adds its finalizer to a live object, or removes it.
func (m *model) otherController() {
	tr := m.objs[fmt.Sprintf("w%d", m.rng.IntN(modelNames))]
	if tr == nil || m.api.objs[tr.name] == nil || m.api.objs[tr.name].GetUID() != tr.uid {
		return
	}
	obj := m.api.objs[tr.name].DeepCopy()
	fins := obj.GetFinalizers()
	switch {
	case slices.Contains(fins, modelForeign):
		obj.SetFinalizers(slices.DeleteFunc(fins, func(f string) bool { return f == modelForeign }))
		m.logf("other controller removes its finalizer from %s", tr)
	case obj.GetDeletionTimestamp() == nil:
		// Before the broker's, so that a stale release must not find
		// the broker's where it was.
		obj.SetFinalizers(append([]string{modelForeign}, fins...))
		m.logf("other controller adds its finalizer to %s", tr)
	default:
		return
	}
	m.api.put(tr, obj)
	m.maybeInform(tr)
}

// tick moves the clock: a little, past the grace, or past
// absent_release_after.
func (m *model) tick() {
	d := time.Duration(m.rng.IntN(3000)) * time.Millisecond
	switch n := m.rng.IntN(20); {
	case n == 0:
		d = modelGrace + time.Second
	case n == 1:
		d = modelAfter + time.Second
	case n < 6:
		d = time.Duration(m.rng.IntN(10)) * time.Second
	}
	m.advance(d)
}

// advance moves the clock by d; a change of the handler's presence has
// every object looked at again, as the presence keeper does.
func (m *model) advance(d time.Duration) {
	before := m.presence()
	m.p.clk.Step(d)
	if after := m.presence(); after != before {
		m.logf("clock +%v: handler %v", d, after)
		m.requeueAll(false)
	}
}

func (m *model) toggleInstance() {
	if m.connected {
		m.leave()
	} else {
		m.join()
	}
}

func (m *model) leave() {
	m.p.h.presence.leave(instanceA)
	m.connected, m.leftAt = false, m.p.clk.Now()
	m.logf("the instance disconnects")
	m.requeueAll(false)
}

func (m *model) join() {
	m.p.h.presence.join(instanceA)
	m.connected = true
	m.logf("the instance connects")
	m.requeueAll(true)
}

// fault has the API server answer the next write of the broker with a
// conflict or a refusal.
func (m *model) fault() {
	if m.calm {
		return
	}
	m.api.fault = apierrors.NewConflict(widgetsGR, "w", errors.New("the object has been modified"))
	if m.rng.IntN(3) == 0 {
		m.api.fault = apierrors.NewForbidden(widgetsGR, "w", errors.New("denied by a policy"))
	}
}
