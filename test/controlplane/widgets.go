package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// The test custom resource, Widget (widgets.test.tether.dev/v1): namespaced,
// with a status subresource and schemaless spec and status. It is created
// through the dynamic client on apiextensions.k8s.io/v1, so the module does not
// need k8s.io/apiextensions-apiserver.
var (
	WidgetGVR = schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}
	// CRDGVR is the resource of CustomResourceDefinitions.
	CRDGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

const widgetCRDName = "widgets.test.tether.dev"

const widgetCRD = `{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "` + widgetCRDName + `"},
  "spec": {
    "group": "test.tether.dev",
    "scope": "Namespaced",
    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wdg"]},
    "versions": [{
      "name": "v1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {
        "type": "object",
        "properties": {
          "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
          "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }
      }}
    }]
  }
}`

// Dynamic returns an admin dynamic client, failing the test if it cannot be
// built.
func (cp *ControlPlane) Dynamic(t testing.TB) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatalf("creating a dynamic client: %v", err)
	}
	return dyn
}

// EnsureWidgetCRD creates the Widget CRD if it does not exist yet (tests may
// race to do so), waits until it is Established and returns an admin dynamic
// client. The CRD is left in place for the rest of the test binary.
func (cp *ControlPlane) EnsureWidgetCRD(t testing.TB) dynamic.Interface {
	t.Helper()
	dyn := cp.Dynamic(t)
	if err := InstallWidgetCRD(context.Background(), dyn, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return dyn
}

// InstallWidgetCRD creates the Widget CRD if needed and waits up to timeout
// for it to be Established. Tests use EnsureWidgetCRD; the benchmarks, which
// have no testing.TB, call this.
func InstallWidgetCRD(ctx context.Context, dyn dynamic.Interface, timeout time.Duration) error {
	return InstallCRD(ctx, dyn, widgetCRD, timeout)
}

// InstallCRD creates a CustomResourceDefinition from its JSON if it does not
// exist yet, and waits up to timeout for it to be Established.
func InstallCRD(ctx context.Context, dyn dynamic.Interface, crdJSON string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	crd := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(crdJSON), &crd.Object); err != nil {
		return fmt.Errorf("decoding a CRD: %w", err)
	}
	name := crd.GetName()
	crds := dyn.Resource(CRDGVR)
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the CRD %s: %w", name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the CRD %s to be Established: %w", name, err)
	}
	return nil
}
