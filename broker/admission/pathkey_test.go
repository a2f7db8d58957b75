package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestPathKeyIsSharedThroughItsSecret: the first load makes the key,
// the next (another replica, a restart) reads the same one.
func TestPathKeyIsSharedThroughItsSecret(t *testing.T) {
	client := fake.NewClientset()
	a, err := LoadPathKey(t.Context(), client, "tether-system", "k")
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadPathKey(t.Context(), client, "tether-system", "k")
	if err != nil {
		t.Fatal(err)
	}
	if a.Path("h", "b") != b.Path("h", "b") {
		t.Error("two loads of the path key signed differently")
	}
}

// TestPathKeyInANamespaceBeingDeleted: during an uninstall by namespace
// deletion the Secret may be gone and cannot be made again; a broker
// restarted then must still start (to release its holds), with a key of
// its own.
func TestPathKeyInANamespaceBeingDeleted(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
			Message: "unable to create new content in namespace tether-system because it is being terminated",
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}},
		}}
	})
	k, err := LoadPathKey(t.Context(), client, "tether-system", "k")
	if err != nil {
		t.Fatalf("loading the path key in a namespace being deleted: %v", err)
	}
	if _, _, ok := k.parse(k.Path("h", "b")); !ok {
		t.Error("the key kept in memory does not verify its own paths")
	}
}
