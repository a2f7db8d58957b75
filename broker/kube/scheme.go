package kube

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// Scheme knows the types Interface reads and writes, and no other: a
// group's AddToScheme would register all of its types.
var Scheme = newScheme()

// Codecs encode and decode the types of Scheme.
var Codecs = serializer.NewCodecFactory(Scheme)

// ParameterCodec encodes the options of a request (ListOptions...).
var ParameterCodec = runtime.NewParameterCodec(Scheme)

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	for gv, types := range map[schema.GroupVersion][]runtime.Object{
		corev1.SchemeGroupVersion: {
			&corev1.Secret{}, &corev1.SecretList{}, &corev1.ConfigMap{}, &corev1.ConfigMapList{},
			&corev1.Namespace{}, &corev1.NamespaceList{}, &corev1.Pod{}, &corev1.PodList{},
			&corev1.ServiceAccount{}, &corev1.ServiceAccountList{}, &corev1.Event{}, &corev1.EventList{},
		},
		coordinationv1.SchemeGroupVersion: {&coordinationv1.Lease{}, &coordinationv1.LeaseList{}},
		authenticationv1.SchemeGroupVersion: {
			&authenticationv1.TokenReview{}, &authenticationv1.SelfSubjectReview{},
		},
		authorizationv1.SchemeGroupVersion: {
			&authorizationv1.SubjectAccessReview{}, &authorizationv1.SelfSubjectAccessReview{},
		},
		admissionregistrationv1.SchemeGroupVersion: {
			&admissionregistrationv1.ValidatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfigurationList{},
			&admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.MutatingWebhookConfigurationList{},
		},
		rbacv1.SchemeGroupVersion: {
			&rbacv1.Role{}, &rbacv1.RoleList{}, &rbacv1.RoleBinding{}, &rbacv1.RoleBindingList{},
			&rbacv1.ClusterRole{}, &rbacv1.ClusterRoleList{}, &rbacv1.ClusterRoleBinding{}, &rbacv1.ClusterRoleBindingList{},
		},
		appsv1.SchemeGroupVersion: {&appsv1.Deployment{}, &appsv1.DeploymentList{}},
	} {
		s.AddKnownTypes(gv, types...)
		metav1.AddToGroupVersion(s, gv)
	}
	return s
}
