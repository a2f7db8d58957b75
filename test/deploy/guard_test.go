package deploy

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTheBaseRoleAloneFreesTheUninstallGuard: once the broker has taken
// the uninstall guard off its RoleBinding, which then goes with the Role's
// rights, tether-broker-base (and the uninstall grant, its copy) still
// lets it get and patch its own ServiceAccount, Role and RoleBinding, by
// name, and nothing else of the kind. Asked for a ServiceAccount
// tether-broker of another namespace bound to tether-broker-base alone,
// so that the shared install keeps its RoleBinding.
func TestTheBaseRoleAloneFreesTheUninstallGuard(t *testing.T) {
	cp, _ := applyManifests(t)
	elsewhere := cp.Namespace(t)
	ctx := context.Background()
	name := "tether-deploy-test-base-" + elsewhere
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: brokerName, Namespace: elsewhere}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: brokerName + "-base"}}
	if _, err := cp.Client().RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := cp.Client().RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", name, err)
		}
	})
	const rbac = "rbac.authorization.k8s.io"
	var table []access
	for _, r := range []struct{ group, resource string }{{"", "serviceaccounts"}, {rbac, "roles"}, {rbac, "rolebindings"}} {
		table = append(table,
			allow("get", r.group, r.resource, elsewhere).named(brokerName),
			allow("patch", r.group, r.resource, elsewhere).named(brokerName),
			deny("update", r.group, r.resource, elsewhere).named(brokerName),
			deny("delete", r.group, r.resource, elsewhere).named(brokerName),
			deny("patch", r.group, r.resource, elsewhere).named("other"),
			deny("list", r.group, r.resource, elsewhere),
		)
	}
	table = append(table, deny("bind", rbac, "roles", elsewhere).named(brokerName),
		deny("escalate", rbac, "roles", elsewhere).named(brokerName))
	checkAccess(t, cp.Client(), elsewhere, brokerName, table)
}
