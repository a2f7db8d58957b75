package guard

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/kube"
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
// collector removes it, or until Revoke. The rules of an aggregated
// ClusterRole (tether-broker) are copied as the aggregation controller
// filled them, without its aggregation rule, so the copy does not grow by
// itself. It only copies rules the broker holds, which the API server lets
// it grant itself without the escalate or bind verbs.
func Grant(ctx context.Context, kube kube.Interface, namespace, sa string) error {
	return grant(ctx, kube, namespace, sa, false)
}

// Widen is Grant that keeps every rule the copy already holds and adds
// those bound since: called while the broker leads, so that a handler's
// grant aggregated after the start is in the copy, and an uninstall that
// deletes the aggregated ClusterRole before the broker notices cannot
// shrink the copy before the broker has released its holds.
func Widen(ctx context.Context, kube kube.Interface, namespace, sa string) error {
	return grant(ctx, kube, namespace, sa, true)
}

func grant(ctx context.Context, kube kube.Interface, namespace, sa string, keep bool) error {
	rbac := kube.RbacV1()
	ns, err := kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	name := GrantName(namespace)
	rules, err := boundRules(ctx, kube, name, namespace, sa)
	if err != nil {
		return err
	}
	role, err := rbac.ClusterRoles().Get(ctx, name, metav1.GetOptions{})
	if err == nil && keep {
		rules = union(role.Rules, rules)
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

// boundRules are the rules of every ClusterRole bound to namespace/sa but
// the grant itself (named grantName).
func boundRules(ctx context.Context, kube kube.Interface, grantName, namespace, sa string) ([]rbacv1.PolicyRule, error) {
	rbac := kube.RbacV1()
	bindings, err := rbac.ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ClusterRoleBindings: %w", err)
	}
	var rules []rbacv1.PolicyRule
	for _, b := range bindings.Items {
		if b.Name == grantName || b.RoleRef.Kind != "ClusterRole" || !names(b.Subjects, namespace, sa) {
			continue
		}
		role, err := rbac.ClusterRoles().Get(ctx, b.RoleRef.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading ClusterRole %s: %w", b.RoleRef.Name, err)
		}
		rules = append(rules, role.Rules...)
	}
	return rules, nil
}

// union is have with the rules of more it lacks appended, in order.
func union(have, more []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	out := slices.Clone(have)
	for _, r := range more {
		if !slices.ContainsFunc(out, func(h rbacv1.PolicyRule) bool { return reflect.DeepEqual(h, r) }) {
			out = append(out, r)
		}
	}
	return out
}

// grantLabels mark the grant as the broker's own.
var grantLabels = map[string]string{"app.kubernetes.io/managed-by": "tether-broker"}

// Revoke deletes the grant of the broker in namespace: its ClusterRole,
// and with it (by the garbage collector) its binding.
func Revoke(ctx context.Context, kube kube.Interface, namespace string) error {
	err := kube.RbacV1().ClusterRoles().Delete(ctx, GrantName(namespace), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ClusterRole %s: %w", GrantName(namespace), err)
	}
	return nil
}
