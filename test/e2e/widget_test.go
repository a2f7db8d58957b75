package e2e

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tether-dev/tether/test/controlplane"
)

func hasFinalizers(want ...string) func(*unstructured.Unstructured) bool {
	return func(o *unstructured.Unstructured) bool { return slices.Equal(o.GetFinalizers(), want) }
}

func requireFinalizers(t *testing.T, o *unstructured.Unstructured, want ...string) {
	t.Helper()
	if got := o.GetFinalizers(); !slices.Equal(got, want) {
		t.Fatalf("%s finalizers = %v, want %v", o.GetName(), got, want)
	}
}

// TestWidgetFinalizerRoundTrip walks an object through the life a broker hold
// gives it: another controller's finalizer and ours side by side, deletion that
// waits for both, our guarded removal leaving the other one in place, and the
// object going away (seen by an informer) only when the last finalizer goes.
func TestWidgetFinalizerRoundTrip(t *testing.T) {
	t.Parallel()
	cp := controlplane.Get(t)
	dyn := widgetClient(t, cp)
	ns := cp.Namespace(t)
	events := watchWidgets(t, dyn, ns)
	widgets := dyn.Resource(widgetGVR).Namespace(ns)
	ctx := t.Context()

	created, err := widgets.Create(ctx, newWidget("w1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating widget: %v", err)
	}
	sameUID := func(o *unstructured.Unstructured) bool { return o.GetUID() == created.GetUID() }
	expectEvent(t, events, "ADDED", "widget w1 created", sameUID)

	// Another controller puts its finalizer on first (the list is empty, so
	// the guard is the resourceVersion).
	obj, err := jsonPatch(ctx, widgets, "w1", addFinalizerPatch(created, otherFinalizer))
	if err != nil {
		t.Fatalf("adding %s: %v", otherFinalizer, err)
	}
	requireFinalizers(t, obj, otherFinalizer)
	expectEvent(t, events, "MODIFIED", "other finalizer added", hasFinalizers(otherFinalizer))

	// Ours is appended with a patch that tests the whole list first: the
	// other controller's entry survives.
	obj, err = jsonPatch(ctx, widgets, "w1", addFinalizerPatch(obj, ourFinalizer))
	if err != nil {
		t.Fatalf("adding %s: %v", ourFinalizer, err)
	}
	requireFinalizers(t, obj, otherFinalizer, ourFinalizer)
	expectEvent(t, events, "MODIFIED", "both finalizers present", hasFinalizers(otherFinalizer, ourFinalizer))

	// Deleting only marks the object while finalizers remain.
	uid := created.GetUID()
	if err := widgets.Delete(ctx, "w1", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		t.Fatalf("deleting widget: %v", err)
	}
	obj, err = widgets.Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("widget gone although it has finalizers: %v", err)
	}
	if obj.GetDeletionTimestamp() == nil {
		t.Fatal("deleted widget has no deletionTimestamp")
	}
	requireFinalizers(t, obj, otherFinalizer, ourFinalizer)
	expectEvent(t, events, "MODIFIED", "deletionTimestamp set", func(o *unstructured.Unstructured) bool {
		return o.GetDeletionTimestamp() != nil
	})

	// Our hold goes with a patch that tests index and value before removing.
	obj, err = jsonPatch(ctx, widgets, "w1", removeFinalizerPatch(t, obj, ourFinalizer))
	if err != nil {
		t.Fatalf("removing %s: %v", ourFinalizer, err)
	}
	requireFinalizers(t, obj, otherFinalizer)
	expectEvent(t, events, "MODIFIED", "only the other finalizer left", hasFinalizers(otherFinalizer))
	obj, err = widgets.Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("widget gone while %s still holds it: %v", otherFinalizer, err)
	}
	requireFinalizers(t, obj, otherFinalizer)

	// When the other controller lets go, the object is removed.
	if _, err := jsonPatch(ctx, widgets, "w1", removeFinalizerPatch(t, obj, otherFinalizer)); err != nil {
		t.Fatalf("removing %s: %v", otherFinalizer, err)
	}
	gone := expectEvent(t, events, "DELETED", "widget w1 removed", sameUID)
	if gone.GetDeletionTimestamp() == nil {
		t.Error("the DELETED event's object has no deletionTimestamp")
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, eventTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := widgets.Get(ctx, "w1", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("widget still readable after its last finalizer went: %v", err)
	}
}

// statusCode returns the HTTP status of an API error.
func statusCode(t *testing.T, err error) int32 {
	t.Helper()
	var s apierrors.APIStatus
	if !errors.As(err, &s) {
		t.Fatalf("not an API status error: %v", err)
	}
	return s.Status().Code
}

// TestGuardedPatchWithFailingTestIsRejected shows that a JSON patch whose
// "test" operation fails is refused as a whole and changes nothing.
//
// Observed with kube-apiserver v1.37.2: HTTP 422 Unprocessable Entity, reason
// "Invalid" (apierrors.IsInvalid is true, apierrors.IsConflict is false), for a
// failed test on the finalizer list and on a stale resourceVersion alike. The
// broker must therefore treat a 422 from its own guarded patch as "the object
// moved on: re-read and retry", not as a malformed request. Only a
// resourceVersion carried in the patched body gives 409 Conflict (case 3).
func TestGuardedPatchWithFailingTestIsRejected(t *testing.T) {
	t.Parallel()
	cp := controlplane.Get(t)
	dyn := widgetClient(t, cp)
	ns := cp.Namespace(t)
	widgets := dyn.Resource(widgetGVR).Namespace(ns)
	ctx := t.Context()

	// Case 1: our view of the list is wrong (index 0 is not ours).
	before, err := widgets.Create(ctx, newWidget("held", otherFinalizer), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating widget: %v", err)
	}
	_, err = jsonPatch(ctx, widgets, "held", []patchOp{
		{Op: "test", Path: "/metadata/finalizers/0", Value: ourFinalizer},
		{Op: "remove", Path: "/metadata/finalizers/0"},
	})
	if err == nil {
		t.Fatal("a patch whose test fails was accepted")
	}
	code := statusCode(t, err)
	t.Logf("failed JSON-patch test on the finalizer list: HTTP %d, reason %q: %v", code, apierrors.ReasonForError(err), err)
	if code != http.StatusUnprocessableEntity || !apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
		t.Errorf("status %d (invalid %v, conflict %v), want %d Invalid", code, apierrors.IsInvalid(err), apierrors.IsConflict(err), http.StatusUnprocessableEntity)
	}
	after, err := widgets.Get(ctx, "held", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetResourceVersion() != before.GetResourceVersion() {
		t.Errorf("resourceVersion changed from %s to %s", before.GetResourceVersion(), after.GetResourceVersion())
	}
	requireFinalizers(t, after, otherFinalizer)

	// Case 2: the object changed since we read it (stale resourceVersion guard).
	stale, err := widgets.Create(ctx, newWidget("moving"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating widget: %v", err)
	}
	moved, err := widgets.Patch(ctx, "moving", types.MergePatchType, []byte(`{"metadata":{"labels":{"moved":"yes"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("labelling widget: %v", err)
	}
	_, err = jsonPatch(ctx, widgets, "moving", addFinalizerPatch(stale, ourFinalizer))
	if err == nil {
		t.Fatal("a patch guarded by a stale resourceVersion was accepted")
	}
	code = statusCode(t, err)
	t.Logf("failed JSON-patch test on a stale resourceVersion: HTTP %d, reason %q", code, apierrors.ReasonForError(err))
	if code != http.StatusUnprocessableEntity {
		t.Errorf("status %d, want %d", code, http.StatusUnprocessableEntity)
	}
	after, err = widgets.Get(ctx, "moving", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetResourceVersion() != moved.GetResourceVersion() || len(after.GetFinalizers()) != 0 {
		t.Errorf("rejected patch changed the widget: rv %s -> %s, finalizers %v",
			moved.GetResourceVersion(), after.GetResourceVersion(), after.GetFinalizers())
	}

	// Case 3, for comparison: a resourceVersion carried in the patched body is
	// an optimistic-concurrency precondition and fails with 409 Conflict.
	_, err = widgets.Patch(ctx, "moving", types.MergePatchType,
		[]byte(`{"metadata":{"resourceVersion":"`+stale.GetResourceVersion()+`","finalizers":["`+ourFinalizer+`"]}}`), metav1.PatchOptions{})
	if err == nil {
		t.Fatal("a merge patch carrying a stale resourceVersion was accepted")
	}
	code = statusCode(t, err)
	t.Logf("merge patch with a stale resourceVersion: HTTP %d, reason %q", code, apierrors.ReasonForError(err))
	if code != http.StatusConflict {
		t.Errorf("status %d, want %d", code, http.StatusConflict)
	}
}
