package dispatch

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	evjsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tether-dev/tether/broker/hold"
)

// modelAPIServer is the model test's API server: it keeps the widgets, as
// the truth, and answers the broker's patches (through the real
// objectWriter and a fake dynamic client) as kube-apiserver does. It
// applies each JSON patch with its `test` operations, so a write built on
// a state the object no longer has is a lost race (a bare 422); it refuses
// a new finalizer on an object being deleted; it deletes an object being
// deleted once its last finalizer goes, and answers that write with the
// object as it was. Every write of the broker that lands is judged by
// the model (judgeWrite) before it does.
type modelAPIServer struct {
	m    *model
	objs map[string]*unstructured.Unstructured // by name
	rv   int
	// fault is what the next broker write gets instead of landing: a 409
	// or a 403, when set.
	fault error
}

var widgetsGR = schema.GroupResource{Group: "test.tether.dev", Resource: "widgets"}

// client is a dynamic client whose patches of widgets this server answers.
func (a *modelAPIServer) client() *dynamicfake.FakeDynamicClient {
	c := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(kruntime.NewScheme(),
		map[schema.GroupVersionResource]string{passResource.GroupVersionResource: "WidgetList"})
	c.PrependReactor("patch", "widgets", a.patch)
	return c
}

// nextRV is the resourceVersion of the next state of any object.
func (a *modelAPIServer) nextRV() string {
	a.rv++
	return strconv.Itoa(a.rv)
}

// put makes obj the object's next state, written by someone else than the
// broker (the user, another controller), and records it.
func (a *modelAPIServer) put(tr *truth, obj *unstructured.Unstructured) {
	obj.SetResourceVersion(a.nextRV())
	if obj.GetDeletionTimestamp() != nil && len(obj.GetFinalizers()) == 0 {
		delete(a.objs, obj.GetName())
		a.m.logf("  %s is gone (deleted, no finalizer left)", tr)
		return
	}
	a.objs[obj.GetName()] = obj
	tr.record(a.m, obj)
}

func (a *modelAPIServer) patch(action k8stesting.Action) (bool, kruntime.Object, error) {
	pa := action.(k8stesting.PatchAction)
	cur := a.objs[pa.GetName()]
	if cur == nil {
		return true, nil, apierrors.NewNotFound(widgetsGR, pa.GetName())
	}
	if fault := a.fault; fault != nil {
		a.fault = nil
		if apierrors.IsConflict(fault) {
			a.m.seen["conflict"]++
		} else {
			a.m.seen["refused"]++
		}
		a.m.logf("  API server answers the broker's write with %v", fault)
		return true, nil, fault
	}
	if pa.GetPatchType() != types.JSONPatchType {
		a.m.violate("4", "the broker sent a %s patch, which replaces lists whole", pa.GetPatchType())
		return true, nil, apierrors.NewBadRequest("only JSON patches in this test")
	}
	next, err := applyJSONPatch(cur, pa.GetPatch())
	if err != nil {
		a.m.seen["lost race"]++
		a.m.logf("  API server: the broker's patch failed (%v): a lost race", err)
		// What kube-apiserver answers to a failed `test`: a bare 422.
		return true, nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", schema.GroupResource{}, "", "", 0, false)
	}
	tr := a.m.byUID[cur.GetUID()]
	if !hold.Has(cur, "h") && hold.Has(next, "h") && cur.GetDeletionTimestamp() != nil {
		// A hold added on a state from before the deletion, tested by the
		// finalizers alone: the API server keeps rule 1 here.
		a.m.logf("  API server refuses a new finalizer on %s, being deleted", tr)
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: "test.tether.dev", Kind: "Widget"}, cur.GetName(),
			field.ErrorList{field.Forbidden(field.NewPath("metadata", "finalizers"), "no new finalizers can be added if the object is being deleted")})
	}
	a.m.judgeWrite(tr, cur, next)
	if a.m.violation != "" {
		a.m.logf("  the patch: %s", pa.GetPatch())
	}
	next.SetResourceVersion(a.nextRV())
	a.m.logf("  broker wrote %s: rv %s, finalizers %v", tr, next.GetResourceVersion(), next.GetFinalizers())
	if next.GetDeletionTimestamp() != nil && len(next.GetFinalizers()) == 0 {
		delete(a.objs, cur.GetName())
		a.m.logf("  %s is gone (its last finalizer was released)", tr)
		answer := cur.DeepCopy()
		answer.SetResourceVersion(next.GetResourceVersion())
		return true, answer, nil
	}
	a.objs[cur.GetName()] = next
	tr.record(a.m, next)
	return true, next.DeepCopy(), nil
}

// applyJSONPatch is obj with the RFC 6902 patch data applied, failed
// `test` operations included.
func applyJSONPatch(obj *unstructured.Unstructured, data []byte) (*unstructured.Unstructured, error) {
	p, err := evjsonpatch.DecodePatch(data)
	if err != nil {
		return nil, fmt.Errorf("decoding the patch: %w", err)
	}
	doc, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, fmt.Errorf("encoding the object: %w", err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		return nil, fmt.Errorf("applying the patch: %w", err)
	}
	next := &unstructured.Unstructured{}
	if err := next.UnmarshalJSON(out); err != nil {
		return nil, fmt.Errorf("decoding the patched object: %w", err)
	}
	return next, nil
}

// others are obj's finalizers but the handler's, in order.
func others(obj *unstructured.Unstructured) []string {
	return slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(f string) bool { return f == hold.Finalizer("h") })
}

// userLabels are obj's labels but the one the handler's patches set.
func userLabels(obj *unstructured.Unstructured) map[string]string {
	ls := obj.GetLabels()
	delete(ls, modelSeenLabel)
	return ls
}
