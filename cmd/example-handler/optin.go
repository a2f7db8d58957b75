package main

import (
	"context"
	"fmt"
	"slices"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// scope is where the handler works: every namespace (all), or the listed
// ones. Its bindings and its webhook keep to it, and so do the
// replicator's copies unless the namespaces were given (--namespaces).
type scope struct {
	all        bool
	namespaces []string
	given      bool
}

func (s scope) equal(o scope) bool {
	return s.all == o.all && s.given == o.given && slices.Equal(s.namespaces, o.namespaces)
}

// grantedScope is where the handler's identity may work: every namespace
// if it may list Secrets and ConfigMaps cluster-wide (a developer's
// kubeconfig), else each namespace that opted in, by a RoleBinding that
// grants it them there (deploy/example-handler), never a system
// namespace. It asks the API server (SelfSubjectAccessReview), the judge
// the broker asks too before it lets the bindings in.
func grantedScope(ctx context.Context, kube kubernetes.Interface) (scope, error) {
	all, err := mayList(ctx, kube, "")
	if err != nil || all {
		return scope{all: all}, err
	}
	list, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return scope{}, fmt.Errorf("listing namespaces to find those that opted in: %w", err)
	}
	var s scope
	for _, ns := range activeNamespaces(list.Items) {
		if slices.Contains(systemNamespaces, ns) {
			continue
		}
		ok, err := mayList(ctx, kube, ns)
		if err != nil {
			return scope{}, err
		}
		if ok {
			s.namespaces = append(s.namespaces, ns)
		}
	}
	slices.Sort(s.namespaces)
	return s, nil
}

// mayList tells whether the handler may list and watch every replicated
// resource in ns ("" for the whole cluster).
func mayList(ctx context.Context, kube kubernetes.Interface, ns string) (bool, error) {
	for _, gvr := range replicated {
		for _, verb := range []string{"list", "watch"} {
			review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: verb, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource,
				}},
			}, metav1.CreateOptions{})
			if err != nil {
				return false, fmt.Errorf("asking whether the handler may %s %s in %q: %w", verb, gvr.Resource, ns, err)
			}
			if !review.Status.Allowed {
				return false, nil
			}
		}
	}
	return true, nil
}
