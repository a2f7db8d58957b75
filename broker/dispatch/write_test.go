package dispatch

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/tether-dev/tether/broker/progress"
)

// TestLostRaceIsToldFromARefusal sorts the API server's answers to a
// guarded JSON patch: what the object's moving explains is retried on its
// next state, what its content explains is a refusal.
func TestLostRaceIsToldFromARefusal(t *testing.T) {
	widgets := schema.GroupResource{Group: "test.tether.dev", Resource: "widgets"}
	for _, tc := range []struct {
		name      string
		err       error
		lost, ref bool
	}{
		{"409 conflict", apierrors.NewConflict(widgets, "w", errors.New("modified")), true, false},
		// What kube-apiserver 1.37 answers to a failed `test` (measured by
		// TestLostRaceIsWrittenOnTheNextState): a bare 422.
		{"bare 422 of a failed patch op", apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", schema.GroupResource{}, "", "", 0, false), true, false},
		{"422 that names the object", apierrors.NewInvalid(schema.GroupKind{Group: "test.tether.dev", Kind: "Widget"}, "w",
			field.ErrorList{field.Invalid(field.NewPath("metadata", "labels"), "bad value!", "must be a valid label")}), false, true},
		{"403 from a policy", apierrors.NewForbidden(widgets, "w", errors.New("denied by policy")), false, true},
		{"413 too large", apierrors.NewRequestEntityTooLargeError("limit is 3145728"), false, true},
		{"wrapped bare 422", fmt.Errorf("writing: %w", apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", schema.GroupResource{}, "", "", 0, false)), true, false},
		{"a timeout", apierrors.NewServerTimeout(widgets, "patch", 1), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lostRace(tc.err); got != tc.lost {
				t.Errorf("lostRace = %v, want %v", got, tc.lost)
			}
			if got := !lostRace(tc.err) && refused(tc.err); got != tc.ref {
				t.Errorf("refused (and not a lost race) = %v, want %v", got, tc.ref)
			}
		})
	}
}

// TestRefusedHandlerPatchIsNotRecordedAsHandled: once the API server
// refuses the handler's patch, the write records the object as it is as
// handled, not what the patch would have made it.
func TestRefusedHandlerPatchIsNotRecordedAsHandled(t *testing.T) {
	obj := map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w"},
		"spec":     map[string]any{"size": int64(1)},
	}
	w := &write{handler: map[string]any{"metadata": map[string]any{"labels": map[string]any{"denied": "yes"}}}}
	if err := w.recordHandled("h", obj); err != nil {
		t.Fatal(err)
	}
	if progress.Equal(w.lastHandled, progress.Essence(obj)) {
		t.Fatalf("with the handler's patch, the recorded state should carry its label: %v", w.lastHandled)
	}
	if err := w.dropHandlerPart("h"); err != nil {
		t.Fatal(err)
	}
	if len(w.handler) != 0 {
		t.Errorf("the handler's patch is still in the write: %v", w.handler)
	}
	if !progress.Equal(w.lastHandled, progress.Essence(obj)) {
		t.Errorf("recorded as handled: %v, want the object as it is: %v", w.lastHandled, progress.Essence(obj))
	}
	want, err := progress.Encode(progress.Essence(obj))
	if err != nil {
		t.Fatal(err)
	}
	anns, _ := w.merge["metadata"].(map[string]any)["annotations"].(map[string]any)
	if got := anns[progress.LastHandledKey("h")]; got != want {
		t.Errorf("last-handled annotation = %v, want %s", got, want)
	}
}
