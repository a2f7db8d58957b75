package deploy

import (
	"context"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/test/controlplane"
)

// exampleBrokerRole is the ClusterRole deploy/example-handler ships for the
// broker.
const exampleBrokerRole = "tether-broker-example-handler"

// aggregateForBroker gives the broker's ServiceAccount the rules of every
// ClusterRole that the aggregationRule of the ClusterRole tether-broker
// selects, as the API server lists them by that selector. Kubernetes'
// ClusterRole aggregation controller copies those rules into tether-broker;
// this control plane runs no controller manager, so the test binds each
// selected ClusterRole to the broker instead, which gives the same rights
// (test/incluster runs the real controller). The bindings go when the test
// ends.
func aggregateForBroker(t *testing.T, cp *controlplane.ControlPlane) (selected []string) {
	t.Helper()
	ctx := context.Background()
	rbac := cp.Client().RbacV1()
	broker, err := rbac.ClusterRoles().Get(ctx, brokerName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if broker.AggregationRule == nil || len(broker.AggregationRule.ClusterRoleSelectors) == 0 {
		t.Fatalf("the ClusterRole %s aggregates nothing", brokerName)
	}
	for _, sel := range broker.AggregationRule.ClusterRoleSelectors {
		roles, err := rbac.ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&sel)})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range roles.Items {
			selected = append(selected, r.Name)
			bindToBroker(t, cp, r.Name)
		}
	}
	slices.Sort(selected)
	return selected
}

// bindToBroker binds the ClusterRole role to the broker's ServiceAccount
// until the test ends.
func bindToBroker(t *testing.T, cp *controlplane.ControlPlane, role string) {
	t.Helper()
	ctx := context.Background()
	name := "tether-deploy-test-aggregated-" + role
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: brokerName, Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}
	if _, err := cp.Client().RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Client().RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", name, err)
		}
	})
}

// grantBrokerWidgets installs what a widgets handler's install ships for
// the broker, as docs/security.md tells a handler author to write it: a
// ClusterRole with the aggregation label and get, list, watch and patch on
// widgets. It goes when the test ends.
func grantBrokerWidgets(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "tether-broker-widgets", Labels: map[string]string{auth.AggregationLabel: "true"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"test.tether.dev"}, Resources: []string{"widgets"},
			Verbs: []string{"get", "list", "watch", "patch"}}},
	}
	if _, err := cp.Client().RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Client().RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting %s: %v", role.Name, err)
		}
	})
}

// TestBrokerRightsFollowTheHandlers: the broker may watch and patch what a
// handler binds only once that handler's grant is aggregated: the example
// handler's (Secrets and ConfigMaps, deploy/example-handler), then a
// widgets handler's; and never more than a grant says (no create, update,
// delete, no status, nothing in kube-system but what the grant names).
func TestBrokerRightsFollowTheHandlers(t *testing.T) {
	cp, _ := applyManifests(t)
	const other = "some-namespace"
	none := []access{
		deny("list", "", "secrets", ""),
		deny("get", "", "secrets", "kube-system"),
		deny("watch", "", "configmaps", ""),
		deny("list", "test.tether.dev", "widgets", ""),
		deny("patch", "test.tether.dev", "widgets", other),
	}
	checkAccess(t, cp.Client(), ns, brokerName, none)

	if got := aggregateForBroker(t, cp); !slices.Equal(got, []string{exampleBrokerRole}) {
		t.Fatalf("tether-broker aggregates %v, want the example handler's %s", got, exampleBrokerRole)
	}
	example := []access{
		deny("list", "test.tether.dev", "widgets", ""),
		deny("patch", "test.tether.dev", "widgets", other),
		deny("patch", "", "pods", "kube-system").sub("ephemeralcontainers"),
		deny("get", "", "nodes", "").sub("proxy"),
		deny("patch", "apps", "deployments", "kube-system"),
	}
	for _, r := range []string{"secrets", "configmaps"} {
		example = append(example, allow("list", "", r, ""), allow("watch", "", r, ""),
			allow("get", "", r, other), allow("patch", "", r, other),
			deny("create", "", r, other), deny("update", "", r, other), deny("delete", "", r, other))
	}
	checkAccess(t, cp.Client(), ns, brokerName, example)

	grantBrokerWidgets(t, cp)
	bindToBroker(t, cp, "tether-broker-widgets")
	checkAccess(t, cp.Client(), ns, brokerName, []access{
		allow("list", "test.tether.dev", "widgets", ""),
		allow("watch", "test.tether.dev", "widgets", ""),
		allow("patch", "test.tether.dev", "widgets", other),
		deny("patch", "test.tether.dev", "widgets", other).sub("status"),
		deny("update", "test.tether.dev", "widgets", other),
		deny("delete", "test.tether.dev", "widgets", other),
		deny("list", "test.tether.dev", "gadgets", ""),
	})
}
