package main

import (
	"context"
	"slices"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// grantedIn answers SelfSubjectAccessReviews as RBAC would for a handler
// granted list and watch on Secrets and ConfigMaps in the namespaces
// granted ("" for cluster-wide).
func grantedIn(kube *kubefake.Clientset, granted ...string) {
	kube.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		ns := review.Spec.ResourceAttributes.Namespace
		review.Status.Allowed = slices.Contains(granted, "") || (ns != "" && slices.Contains(granted, ns))
		return true, review, nil
	})
}

func TestGrantedScope(t *testing.T) {
	namespaces := []runtime.Object{}
	for _, n := range []string{"team-a", "team-b", "team-c", "kube-system", "going"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if n == "going" {
			ns.Status.Phase = corev1.NamespaceTerminating
		}
		namespaces = append(namespaces, ns)
	}
	for _, tc := range []struct {
		name    string
		granted []string
		want    scope
	}{
		{"cluster-wide: every namespace", []string{""}, scope{all: true}},
		{"opted in: those namespaces, never a system or terminating one", []string{"team-c", "team-a", "kube-system", "going"},
			scope{namespaces: []string{"team-a", "team-c"}}},
		{"none opted in", nil, scope{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := kubefake.NewClientset(namespaces...)
			grantedIn(kube, tc.granted...)
			got, err := grantedScope(context.Background(), kube)
			if err != nil {
				t.Fatal(err)
			}
			if !got.equal(tc.want) {
				t.Errorf("grantedScope = %+v, want %+v", got, tc.want)
			}
		})
	}
}
