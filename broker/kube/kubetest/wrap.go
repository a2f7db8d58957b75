// Package kubetest makes a kube.Interface of a client-go clientset, for
// tests: the fake clientset, with its object tracker and reactors, or the
// test control plane's. Only tests import it, so the broker's binary links
// neither the clientset nor its scheme.
package kubetest

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/broker/kube"
)

// Wrap serves kube.Interface with the clientset c.
func Wrap(c kubernetes.Interface) kube.Interface { return clientset{c} }

type clientset struct{ c kubernetes.Interface }

// IsWatchListSemanticsUnSupported passes on what the fake clientset says
// of watch lists (it has none), which informers built with
// cache.ToListWatcherWithWatchListSemantics(lw, client) ask.
func (w clientset) IsWatchListSemanticsUnSupported() bool {
	u, ok := w.c.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}

func (w clientset) CoreV1() kube.CoreV1                     { return core{w.c} }
func (w clientset) CoordinationV1() kube.CoordinationV1     { return coordination{w.c} }
func (w clientset) AuthenticationV1() kube.AuthenticationV1 { return authentication{w.c} }
func (w clientset) AuthorizationV1() kube.AuthorizationV1   { return authorization{w.c} }
func (w clientset) AdmissionregistrationV1() kube.AdmissionregistrationV1 {
	return admissionregistration{w.c}
}
func (w clientset) RbacV1() kube.RbacV1 { return rbac{w.c} }
func (w clientset) AppsV1() kube.AppsV1 { return apps{w.c} }

type core struct{ c kubernetes.Interface }

func (g core) Secrets(ns string) kube.Resource[*corev1.Secret, *corev1.SecretList] {
	return g.c.CoreV1().Secrets(ns)
}

func (g core) ConfigMaps(ns string) kube.Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return g.c.CoreV1().ConfigMaps(ns)
}

func (g core) Namespaces() kube.Resource[*corev1.Namespace, *corev1.NamespaceList] {
	return g.c.CoreV1().Namespaces()
}

func (g core) Pods(ns string) kube.Resource[*corev1.Pod, *corev1.PodList] {
	return g.c.CoreV1().Pods(ns)
}

func (g core) ServiceAccounts(ns string) kube.Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList] {
	return g.c.CoreV1().ServiceAccounts(ns)
}

func (g core) Events(ns string) kube.Resource[*corev1.Event, *corev1.EventList] {
	return g.c.CoreV1().Events(ns)
}

type coordination struct{ c kubernetes.Interface }

func (g coordination) Leases(ns string) kube.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return g.c.CoordinationV1().Leases(ns)
}

type authentication struct{ c kubernetes.Interface }

func (g authentication) TokenReviews() kube.Review[*authenticationv1.TokenReview] {
	return g.c.AuthenticationV1().TokenReviews()
}

func (g authentication) SelfSubjectReviews() kube.Review[*authenticationv1.SelfSubjectReview] {
	return g.c.AuthenticationV1().SelfSubjectReviews()
}

type authorization struct{ c kubernetes.Interface }

func (g authorization) SubjectAccessReviews() kube.Review[*authorizationv1.SubjectAccessReview] {
	return g.c.AuthorizationV1().SubjectAccessReviews()
}

func (g authorization) SelfSubjectAccessReviews() kube.Review[*authorizationv1.SelfSubjectAccessReview] {
	return g.c.AuthorizationV1().SelfSubjectAccessReviews()
}

type admissionregistration struct{ c kubernetes.Interface }

func (g admissionregistration) ValidatingWebhookConfigurations() kube.Resource[*admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfigurationList] {
	return g.c.AdmissionregistrationV1().ValidatingWebhookConfigurations()
}

func (g admissionregistration) MutatingWebhookConfigurations() kube.Resource[*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfigurationList] {
	return g.c.AdmissionregistrationV1().MutatingWebhookConfigurations()
}

type rbac struct{ c kubernetes.Interface }

func (g rbac) Roles(ns string) kube.Resource[*rbacv1.Role, *rbacv1.RoleList] {
	return g.c.RbacV1().Roles(ns)
}

func (g rbac) RoleBindings(ns string) kube.Resource[*rbacv1.RoleBinding, *rbacv1.RoleBindingList] {
	return g.c.RbacV1().RoleBindings(ns)
}

func (g rbac) ClusterRoles() kube.Resource[*rbacv1.ClusterRole, *rbacv1.ClusterRoleList] {
	return g.c.RbacV1().ClusterRoles()
}

func (g rbac) ClusterRoleBindings() kube.Resource[*rbacv1.ClusterRoleBinding, *rbacv1.ClusterRoleBindingList] {
	return g.c.RbacV1().ClusterRoleBindings()
}

type apps struct{ c kubernetes.Interface }

func (g apps) Deployments(ns string) kube.Resource[*appsv1.Deployment, *appsv1.DeploymentList] {
	return g.c.AppsV1().Deployments(ns)
}
