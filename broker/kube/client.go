package kube

import (
	"context"
	"fmt"
	"net/http"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Resource is what the broker does with the objects of one resource: the
// methods of client-go's typed clients it calls, with their signatures, so
// that those clients (the fake clientset's in tests) are Resources too.
type Resource[T, L any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// Review is a resource that is only created: the API server answers in
// the returned object and keeps nothing.
type Review[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
}

// Interface is the broker's client of the built-in resources, with the
// clientset's method chains.
type Interface interface {
	CoreV1() CoreV1
	CoordinationV1() CoordinationV1
	AuthenticationV1() AuthenticationV1
	AuthorizationV1() AuthorizationV1
	AdmissionregistrationV1() AdmissionregistrationV1
	RbacV1() RbacV1
	AppsV1() AppsV1
}

// CoreV1 is the core group's resources the broker uses.
type CoreV1 interface {
	Secrets(namespace string) Resource[*corev1.Secret, *corev1.SecretList]
	ConfigMaps(namespace string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList]
	Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList]
	Pods(namespace string) Resource[*corev1.Pod, *corev1.PodList]
	ServiceAccounts(namespace string) Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList]
	Events(namespace string) Resource[*corev1.Event, *corev1.EventList]
}

// CoordinationV1 is coordination.k8s.io/v1: the Leases.
type CoordinationV1 interface {
	Leases(namespace string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
}

// AuthenticationV1 is authentication.k8s.io/v1's reviews.
type AuthenticationV1 interface {
	TokenReviews() Review[*authenticationv1.TokenReview]
	SelfSubjectReviews() Review[*authenticationv1.SelfSubjectReview]
}

// AuthorizationV1 is authorization.k8s.io/v1's reviews.
type AuthorizationV1 interface {
	SubjectAccessReviews() Review[*authorizationv1.SubjectAccessReview]
	SelfSubjectAccessReviews() Review[*authorizationv1.SelfSubjectAccessReview]
}

// AdmissionregistrationV1 is the webhook configurations.
type AdmissionregistrationV1 interface {
	ValidatingWebhookConfigurations() Resource[*admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfigurationList]
	MutatingWebhookConfigurations() Resource[*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfigurationList]
}

// RbacV1 is rbac.authorization.k8s.io/v1.
type RbacV1 interface {
	Roles(namespace string) Resource[*rbacv1.Role, *rbacv1.RoleList]
	RoleBindings(namespace string) Resource[*rbacv1.RoleBinding, *rbacv1.RoleBindingList]
	ClusterRoles() Resource[*rbacv1.ClusterRole, *rbacv1.ClusterRoleList]
	ClusterRoleBindings() Resource[*rbacv1.ClusterRoleBinding, *rbacv1.ClusterRoleBindingList]
}

// AppsV1 is apps/v1: the broker's own Deployment.
type AppsV1 interface {
	Deployments(namespace string) Resource[*appsv1.Deployment, *appsv1.DeploymentList]
}

// NewForConfig makes the client, one REST client per group version over
// one HTTP client and one rate limiter, as kubernetes.NewForConfig does.
func NewForConfig(cfg *rest.Config) (Interface, error) {
	c := *cfg
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("making a Kubernetes client: burst must be above 0 when QPS is set")
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	hc, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, fmt.Errorf("making a Kubernetes client: %w", err)
	}
	var cl client
	for _, g := range []struct {
		gv  schema.GroupVersion
		out *rest.Interface
	}{
		{corev1.SchemeGroupVersion, &cl.core},
		{coordinationv1.SchemeGroupVersion, &cl.coordination},
		{authenticationv1.SchemeGroupVersion, &cl.authentication},
		{authorizationv1.SchemeGroupVersion, &cl.authorization},
		{admissionregistrationv1.SchemeGroupVersion, &cl.admissionregistration},
		{rbacv1.SchemeGroupVersion, &cl.rbac},
		{appsv1.SchemeGroupVersion, &cl.apps},
	} {
		if *g.out, err = restClient(c, hc, g.gv); err != nil {
			return nil, err
		}
	}
	return &cl, nil
}

// restClient is the REST client of one group version.
func restClient(c rest.Config, hc *http.Client, gv schema.GroupVersion) (rest.Interface, error) {
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(Scheme, Codecs).WithoutConversion()
	rc, err := rest.RESTClientForConfigAndClient(&c, hc)
	if err != nil {
		return nil, fmt.Errorf("making the Kubernetes client of %s: %w", gv, err)
	}
	return rc, nil
}

// client is Interface over client-go's generic typed client.
type client struct {
	core, coordination, authentication, authorization, admissionregistration, rbac, apps rest.Interface
}

func (c *client) CoreV1() CoreV1                     { return core{c.core} }
func (c *client) CoordinationV1() CoordinationV1     { return coordination{c.coordination} }
func (c *client) AuthenticationV1() AuthenticationV1 { return authentication{c.authentication} }
func (c *client) AuthorizationV1() AuthorizationV1   { return authorization{c.authorization} }
func (c *client) AdmissionregistrationV1() AdmissionregistrationV1 {
	return admissionregistration{c.admissionregistration}
}
func (c *client) RbacV1() RbacV1 { return rbac{c.rbac} }
func (c *client) AppsV1() AppsV1 { return apps{c.apps} }

type core struct{ rc rest.Interface }

func (g core) Secrets(ns string) Resource[*corev1.Secret, *corev1.SecretList] {
	return resource(g.rc, "secrets", ns, func() *corev1.Secret { return new(corev1.Secret) }, func() *corev1.SecretList { return new(corev1.SecretList) })
}

func (g core) ConfigMaps(ns string) Resource[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return resource(g.rc, "configmaps", ns, func() *corev1.ConfigMap { return new(corev1.ConfigMap) }, func() *corev1.ConfigMapList { return new(corev1.ConfigMapList) })
}

func (g core) Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList] {
	return resource(g.rc, "namespaces", "", func() *corev1.Namespace { return new(corev1.Namespace) }, func() *corev1.NamespaceList { return new(corev1.NamespaceList) })
}

func (g core) Pods(ns string) Resource[*corev1.Pod, *corev1.PodList] {
	return resource(g.rc, "pods", ns, func() *corev1.Pod { return new(corev1.Pod) }, func() *corev1.PodList { return new(corev1.PodList) })
}

func (g core) ServiceAccounts(ns string) Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList] {
	return resource(g.rc, "serviceaccounts", ns, func() *corev1.ServiceAccount { return new(corev1.ServiceAccount) }, func() *corev1.ServiceAccountList { return new(corev1.ServiceAccountList) })
}

func (g core) Events(ns string) Resource[*corev1.Event, *corev1.EventList] {
	return resource(g.rc, "events", ns, func() *corev1.Event { return new(corev1.Event) }, func() *corev1.EventList { return new(corev1.EventList) })
}

type coordination struct{ rc rest.Interface }

func (g coordination) Leases(ns string) Resource[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return resource(g.rc, "leases", ns, func() *coordinationv1.Lease { return new(coordinationv1.Lease) }, func() *coordinationv1.LeaseList { return new(coordinationv1.LeaseList) })
}

type authentication struct{ rc rest.Interface }

func (g authentication) TokenReviews() Review[*authenticationv1.TokenReview] {
	return review(g.rc, "tokenreviews", func() *authenticationv1.TokenReview { return new(authenticationv1.TokenReview) })
}

func (g authentication) SelfSubjectReviews() Review[*authenticationv1.SelfSubjectReview] {
	return review(g.rc, "selfsubjectreviews", func() *authenticationv1.SelfSubjectReview { return new(authenticationv1.SelfSubjectReview) })
}

type authorization struct{ rc rest.Interface }

func (g authorization) SubjectAccessReviews() Review[*authorizationv1.SubjectAccessReview] {
	return review(g.rc, "subjectaccessreviews", func() *authorizationv1.SubjectAccessReview { return new(authorizationv1.SubjectAccessReview) })
}

func (g authorization) SelfSubjectAccessReviews() Review[*authorizationv1.SelfSubjectAccessReview] {
	return review(g.rc, "selfsubjectaccessreviews", func() *authorizationv1.SelfSubjectAccessReview { return new(authorizationv1.SelfSubjectAccessReview) })
}

type admissionregistration struct{ rc rest.Interface }

func (g admissionregistration) ValidatingWebhookConfigurations() Resource[*admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfigurationList] {
	return resource(g.rc, "validatingwebhookconfigurations", "",
		func() *admissionregistrationv1.ValidatingWebhookConfiguration {
			return new(admissionregistrationv1.ValidatingWebhookConfiguration)
		},
		func() *admissionregistrationv1.ValidatingWebhookConfigurationList {
			return new(admissionregistrationv1.ValidatingWebhookConfigurationList)
		})
}

func (g admissionregistration) MutatingWebhookConfigurations() Resource[*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfigurationList] {
	return resource(g.rc, "mutatingwebhookconfigurations", "",
		func() *admissionregistrationv1.MutatingWebhookConfiguration {
			return new(admissionregistrationv1.MutatingWebhookConfiguration)
		},
		func() *admissionregistrationv1.MutatingWebhookConfigurationList {
			return new(admissionregistrationv1.MutatingWebhookConfigurationList)
		})
}

type rbac struct{ rc rest.Interface }

func (g rbac) Roles(ns string) Resource[*rbacv1.Role, *rbacv1.RoleList] {
	return resource(g.rc, "roles", ns, func() *rbacv1.Role { return new(rbacv1.Role) }, func() *rbacv1.RoleList { return new(rbacv1.RoleList) })
}

func (g rbac) RoleBindings(ns string) Resource[*rbacv1.RoleBinding, *rbacv1.RoleBindingList] {
	return resource(g.rc, "rolebindings", ns, func() *rbacv1.RoleBinding { return new(rbacv1.RoleBinding) }, func() *rbacv1.RoleBindingList { return new(rbacv1.RoleBindingList) })
}

func (g rbac) ClusterRoles() Resource[*rbacv1.ClusterRole, *rbacv1.ClusterRoleList] {
	return resource(g.rc, "clusterroles", "", func() *rbacv1.ClusterRole { return new(rbacv1.ClusterRole) }, func() *rbacv1.ClusterRoleList { return new(rbacv1.ClusterRoleList) })
}

func (g rbac) ClusterRoleBindings() Resource[*rbacv1.ClusterRoleBinding, *rbacv1.ClusterRoleBindingList] {
	return resource(g.rc, "clusterrolebindings", "", func() *rbacv1.ClusterRoleBinding { return new(rbacv1.ClusterRoleBinding) }, func() *rbacv1.ClusterRoleBindingList { return new(rbacv1.ClusterRoleBindingList) })
}

type apps struct{ rc rest.Interface }

func (g apps) Deployments(ns string) Resource[*appsv1.Deployment, *appsv1.DeploymentList] {
	return resource(g.rc, "deployments", ns, func() *appsv1.Deployment { return new(appsv1.Deployment) }, func() *appsv1.DeploymentList { return new(appsv1.DeploymentList) })
}
