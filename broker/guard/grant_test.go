package guard

import (
	"context"
	"reflect"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWidenAddsAHandlersGrantAndNeverShrinks: a ClusterRole bound to the
// broker after the grant was made (a handler's grant, which aggregation
// adds to tether-broker) is added to the copy by Widen; when that
// ClusterRole goes (an uninstall deleting it first), Widen keeps its rules
// in the copy, and only Grant, at the next start, makes the copy what is
// bound again.
func TestWidenAddsAHandlersGrantAndNeverShrinks(t *testing.T) {
	cp, ns, asBroker := brokerIn(t)
	ctx := context.Background()
	admin := cp.Client().RbacV1()
	base := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterrolebindings"}, Verbs: []string{"get", "list", "create"}},
	}
	handler := []rbacv1.PolicyRule{{APIGroups: []string{"test.tether.dev"}, Resources: []string{"widgets"}, Verbs: []string{"get", "list", "watch", "patch"}}}
	bind := func(name string, rules []rbacv1.PolicyRule) {
		t.Helper()
		if _, err := admin.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "broker", Namespace: ns}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}
		if _, err := admin.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
			_ = admin.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	t.Cleanup(func() {
		_ = admin.ClusterRoleBindings().Delete(context.Background(), GrantName(ns), metav1.DeleteOptions{})
	})
	copyHas := func(what string, want []rbacv1.PolicyRule) {
		t.Helper()
		got, err := admin.ClusterRoles().Get(ctx, GrantName(ns), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Rules, want) {
			t.Errorf("%s: the copy's rules\n  %v\nwant\n  %v", what, got.Rules, want)
		}
	}

	bind("base-"+ns, base)
	retry(t, func() error { return Grant(ctx, asBroker, ns, "broker") })
	copyHas("Grant at the start", base)

	bind("handler-"+ns, handler)
	retry(t, func() error { return Widen(ctx, asBroker, ns, "broker") })
	both := append(append([]rbacv1.PolicyRule{}, base...), handler...)
	copyHas("Widen after a handler's grant", both)

	_ = admin.ClusterRoleBindings().Delete(ctx, "handler-"+ns, metav1.DeleteOptions{})
	_ = admin.ClusterRoles().Delete(ctx, "handler-"+ns, metav1.DeleteOptions{})
	if err := Widen(ctx, asBroker, ns, "broker"); err != nil {
		t.Fatal(err)
	}
	copyHas("Widen with the handler's grant deleted", both)
	if err := Grant(ctx, asBroker, ns, "broker"); err != nil {
		t.Fatal(err)
	}
	copyHas("Grant at the next start", base)
}

// retry calls f until it succeeds: RBAC caches bindings, so the broker's
// first requests after a binding may be refused.
func retry(t *testing.T, f func() error) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; <-tick.C {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
}
