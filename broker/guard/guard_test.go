package guard

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker/kube"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestGuardKeepsWhatTheBrokerNeedsUntilUnprotect: Guarded finds the
// broker's ServiceAccount, the RoleBinding that names it and its Role, and
// the leader Lease, not a binding of someone else nor a handler's grant to
// impersonate its ServiceAccount; with the guard on, a
// deleted ServiceAccount stays (deleting) and the token it issued still
// works; UnprotectAll (as an admin, for `broker release --all`) lets it go.
func TestGuardKeepsWhatTheBrokerNeedsUntilUnprotect(t *testing.T) {
	cp, ns, asBroker := brokerIn(t)
	ctx := context.Background()
	admin := cp.Client()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "broker"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"rolebindings"}, Verbs: []string{"list"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles"}, Verbs: []string{"get"}},
	}}
	// A handler's grant to act as its ServiceAccount here: not needed to
	// release, not guarded, so that the handler uninstalls at once.
	actAs := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "as-handler"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, ResourceNames: []string{"handler"}, Verbs: []string{"impersonate"}},
	}}
	for _, r := range []*rbacv1.Role{role, actAs} {
		if _, err := admin.RbacV1().Roles(ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, sa := range map[string]string{"broker": "broker", "other": "someone-else", "as-handler": "broker"} {
		roleName := "broker"
		if name == "as-handler" {
			roleName = name
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: roleName}}
		if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "leader"}}
	if _, err := admin.CoordinationV1().Leases(ns).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refs, sa, err := Guarded(ctx, asBroker, ns, "leader")
	if err != nil || sa != "broker" {
		t.Fatalf("Guarded: %v, ServiceAccount %q", err, sa)
	}
	var got []string
	for _, r := range refs {
		got = append(got, r.String())
	}
	want := []string{"leases/leader", "rolebindings/broker", "roles/broker", "serviceaccounts/broker"}
	if !slices.Equal(got, want) {
		t.Fatalf("guarded %v, want %v", got, want)
	}
	dyn := dynamic.NewForConfigOrDie(cp.RESTConfig())
	if err := Protect(ctx, dyn, ns, refs); err != nil {
		t.Fatal(err)
	}
	if err := Protect(ctx, dyn, ns, refs); err != nil { // again: nothing to do
		t.Fatal(err)
	}
	if err := admin.CoreV1().ServiceAccounts(ns).Delete(ctx, "broker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	acct, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "broker", metav1.GetOptions{})
	if err != nil || acct.DeletionTimestamp == nil || !slices.Equal(acct.Finalizers, []string{Finalizer}) {
		t.Fatalf("the deleted ServiceAccount: %v, %+v", err, acct)
	}
	if _, err := asBroker.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the broker's token while its ServiceAccount is deleting: %v", err)
	}

	freed, err := UnprotectAll(ctx, dyn, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(freed) != len(want) || freed[len(freed)-1].String() != "serviceaccounts/broker" {
		t.Errorf("freed %v: want all four, the ServiceAccount last", freed)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "broker", metav1.GetOptions{}); err == nil {
		t.Error("the ServiceAccount is still there after Unprotect")
	}
	rb, err := admin.RbacV1().RoleBindings(ns).Get(ctx, "broker", metav1.GetOptions{})
	if err != nil || len(rb.Finalizers) != 0 {
		t.Errorf("the RoleBinding after Unprotect: %v, finalizers %v", err, rb.Finalizers)
	}
}

func TestServiceAccountOfParsesOnlyServiceAccounts(t *testing.T) {
	for _, c := range []struct {
		user, ns, name string
		ok             bool
	}{
		{"system:serviceaccount:tether-system:tether-broker", "tether-system", "tether-broker", true},
		{"system:serviceaccount:tether-system:", "", "", false},
		{"system:serviceaccount::x", "", "", false},
		{"admin", "", "", false},
		{"system:node:n1", "", "", false},
	} {
		ns, name, ok := serviceAccountOf(c.user)
		if ok != c.ok || (ok && (ns != c.ns || name != c.name)) {
			t.Errorf("serviceAccountOf(%q) = %q, %q, %t; want %q, %q, %t", c.user, ns, name, ok, c.ns, c.name, c.ok)
		}
	}
}

// TestGrantOutlivesTheInstalledClusterRole: the broker's copy of its
// cluster-wide rules, owned by its namespace, keeps its permissions when
// the ClusterRole and binding it was installed with are deleted (as
// `kubectl delete -k` does at once); Revoke removes the copy.
func TestGrantOutlivesTheInstalledClusterRole(t *testing.T) {
	cp, ns, asBroker := brokerIn(t)
	ctx := context.Background()
	admin := cp.Client()
	installed := "installed-" + ns
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: installed}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterrolebindings"}, Verbs: []string{"get", "list", "create"}},
	}}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: installed},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "broker", Namespace: ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: installed}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), GrantName(ns), metav1.DeleteOptions{})
	})
	// RBAC caches bindings: the broker's first requests may be refused.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; <-tick.C {
		err := Grant(ctx, asBroker, ns, "broker")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	if err := Grant(ctx, asBroker, ns, "broker"); err != nil { // again: up to date
		t.Fatal(err)
	}
	copyRole, err := admin.RbacV1().ClusterRoles().Get(ctx, GrantName(ns), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(copyRole.OwnerReferences) != 1 || copyRole.OwnerReferences[0].Kind != "Namespace" || copyRole.OwnerReferences[0].Name != ns {
		t.Errorf("the copy's owners %+v, want the namespace %s", copyRole.OwnerReferences, ns)
	}
	if !reflect.DeepEqual(copyRole.Rules, role.Rules) {
		t.Errorf("the copy's rules %v, want %v", copyRole.Rules, role.Rules)
	}
	_ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, installed, metav1.DeleteOptions{})
	_ = admin.RbacV1().ClusterRoles().Delete(ctx, installed, metav1.DeleteOptions{})
	if _, err := asBroker.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Errorf("with only the copy left, the broker cannot read its namespace: %v", err)
	}
	if err := Revoke(ctx, asBroker, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoles().Get(ctx, GrantName(ns), metav1.GetOptions{}); err == nil {
		t.Error("the copy is still there after Revoke")
	}
}

// brokerIn makes a namespace with the ServiceAccount broker and returns the
// broker's client authenticated with its token.
func brokerIn(t *testing.T) (*controlplane.ControlPlane, string, kube.Interface) {
	t.Helper()
	cp := controlplane.Get(t)
	ns := cp.Namespace(t)
	c, err := kube.NewForConfig(brokerConfig(t, cp, ns))
	if err != nil {
		t.Fatal(err)
	}
	return cp, ns, c
}

// brokerConfig is the control plane's config authenticated with a token
// of the ServiceAccount broker in ns.
func brokerConfig(t *testing.T, cp *controlplane.ControlPlane, ns string) *rest.Config {
	t.Helper()
	token, err := cp.ServiceAccountToken(context.Background(), ns, "broker")
	if err != nil {
		t.Fatal(err)
	}
	cfg := cp.RESTConfig()
	cfg.BearerToken = token
	return cfg
}
