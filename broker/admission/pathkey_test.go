package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tether-dev/tether/broker/kube/kubetest"
)

// TestPathKeyIsSharedThroughItsSecret: the first load makes the key,
// the next (another replica, a restart) reads the same one.
func TestPathKeyIsSharedThroughItsSecret(t *testing.T) {
	client := fake.NewClientset()
	a, err := LoadPathKey(t.Context(), kubetest.Wrap(client), "tether-system", "k")
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadPathKey(t.Context(), kubetest.Wrap(client), "tether-system", "k")
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
	k, err := LoadPathKey(t.Context(), kubetest.Wrap(client), "tether-system", "k")
	if err != nil {
		t.Fatalf("loading the path key in a namespace being deleted: %v", err)
	}
	if _, _, ok := k.parse(k.Path("h", "b")); !ok {
		t.Error("the key kept in memory does not verify its own paths")
	}
}

// TestPathIsAValidServicePath: the API server takes a webhook's
// clientConfig.service.path only when every segment is a lowercase RFC 1123
// subdomain (k8s.io/apiserver's ValidateWebhookService); a URL's path is not
// checked so. A signature with capitals or '_' made every in-cluster
// webhook configuration invalid.
func TestPathIsAValidServicePath(t *testing.T) {
	for i := range 50 {
		key := make([]byte, PathKeySize)
		key[0], key[1] = byte(i), byte(i>>8)
		k, err := NewPathKey(key)
		if err != nil {
			t.Fatal(err)
		}
		p := k.Path("example", "validate-ttl")
		for j, seg := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
			if errs := validation.IsDNS1123Subdomain(seg); len(errs) > 0 {
				t.Fatalf("path %s: segment %d %q: %v", p, j, seg, errs)
			}
		}
		if _, _, ok := k.parse(p); !ok {
			t.Fatalf("path %s does not parse back", p)
		}
	}
}
