package guard

import (
	"context"
	"fmt"
	"reflect"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// GrantName names the broker's own ClusterRole and ClusterRoleBinding for
// an uninstall, one pair per broker namespace.
func GrantName(namespace string) string { return "tether-broker-uninstall-" + namespace }

// Grant makes the broker's own copy of the cluster-wide rules bound to its
// ServiceAccount namespace/sa: a ClusterRole with those rules, owned by the
// namespace, and a ClusterRoleBinding to it, owned by that ClusterRole.
// `kubectl delete -k` and `helm uninstall` delete the ClusterRoles and
// bindings they installed at once, and the broker could then release
// nothing; the copy stays until the namespace is gone, when the garbage
// collector removes it, or until Revoke. It only copies rules the broker
// holds, which the API server lets it grant itself without the escalate or
// bind verbs.
func Grant(ctx context.Context, kube kubernetes.Interface, namespace, sa string) error {
	rbac := kube.RbacV1()
	ns, err := kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	name := GrantName(namespace)
	bindings, err := rbac.ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ClusterRoleBindings: %w", err)
	}
	var rules []rbacv1.PolicyRule
	for _, b := range bindings.Items {
		if b.Name == name || b.RoleRef.Kind != "ClusterRole" || !names(b.Subjects, namespace, sa) {
			continue
		}
		role, err := rbac.ClusterRoles().Get(ctx, b.RoleRef.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading ClusterRole %s: %w", b.RoleRef.Name, err)
		}
		rules = append(rules, role.Rules...)
	}
	if len(rules) == 0 {
		return nil
	}
	want := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: grantLabels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Namespace", Name: ns.Name, UID: ns.UID,
		}}},
		Rules: rules,
	}
	role, err := rbac.ClusterRoles().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		role, err = rbac.ClusterRoles().Create(ctx, want, metav1.CreateOptions{})
	case err == nil && (!reflect.DeepEqual(role.Rules, rules) || !reflect.DeepEqual(role.OwnerReferences, want.OwnerReferences)):
		role.Rules, role.OwnerReferences = rules, want.OwnerReferences
		role, err = rbac.ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("writing ClusterRole %s: %w", name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: grantLabels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole", Name: role.Name, UID: role.UID,
		}}},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
	}
	_, err = rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", name, err)
	}
	return nil
}

// grantLabels mark the grant as the broker's own.
var grantLabels = map[string]string{"app.kubernetes.io/managed-by": "tether-broker"}

// Revoke deletes the grant of the broker in namespace: its ClusterRole,
// and with it (by the garbage collector) its binding.
func Revoke(ctx context.Context, kube kubernetes.Interface, namespace string) error {
	err := kube.RbacV1().ClusterRoles().Delete(ctx, GrantName(namespace), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ClusterRole %s: %w", GrantName(namespace), err)
	}
	return nil
}
