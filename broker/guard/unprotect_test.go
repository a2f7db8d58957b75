package guard

import (
	"context"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
)

// TestUnprotectAsTheBrokerNeedsItsRightsByName: the broker takes the guard
// off as itself, with the rights deploy/ gives it: in its namespace a Role
// that lists RoleBindings and Leases (and lists nothing else), and a
// ClusterRole that lets it get and patch its own ServiceAccount, Role and
// RoleBinding by name. Everything deleted at once (`kubectl delete -k`),
// Unprotect frees the Lease, the RoleBinding, the Role and the
// ServiceAccount last, although freeing the RoleBinding takes away the
// Role's rights; and all four are gone.
func TestUnprotectAsTheBrokerNeedsItsRightsByName(t *testing.T) {
	cp, ns, asBroker := brokerIn(t)
	ctx := context.Background()
	admin := cp.Client()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "broker"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "patch"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"rolebindings"}, Verbs: []string{"list"}},
	}}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "broker"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "broker", Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "broker"}}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	byName := "byname-" + ns
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: byName}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, ResourceNames: []string{"broker"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, ResourceNames: []string{"broker"}, Verbs: []string{"get", "patch"}},
	}}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: byName},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "broker", Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: byName}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), byName, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(context.Background(), byName, metav1.DeleteOptions{})
	})
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "leader"}}
	if _, err := admin.CoordinationV1().Leases(ns).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(brokerConfig(t, cp, ns))
	// RBAC caches bindings: the broker's first requests may be refused.
	var refs []Ref
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; <-tick.C {
		var err error
		refs, _, err = Guarded(ctx, asBroker, ns, "leader")
		if err == nil {
			err = Protect(ctx, dyn, ns, refs)
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	if err := admin.RbacV1().RoleBindings(ns).Delete(ctx, "broker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.RbacV1().Roles(ns).Delete(ctx, "broker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().ServiceAccounts(ns).Delete(ctx, "broker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	freed, err := Unprotect(ctx, dyn, ns, refs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range freed {
		got = append(got, r.String())
	}
	want := []string{"leases/leader", "rolebindings/broker", "roles/broker", "serviceaccounts/broker"}
	if !slices.Equal(got, want) {
		t.Errorf("freed %v, want %v", got, want)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Get(ctx, "broker", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the RoleBinding after Unprotect: %v", err)
	}
	if _, err := admin.RbacV1().Roles(ns).Get(ctx, "broker", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Role after Unprotect: %v", err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "broker", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ServiceAccount after Unprotect: %v", err)
	}
}
