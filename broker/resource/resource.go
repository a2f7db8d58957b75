package resource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// Resource is a resolved resource.
type Resource struct {
	schema.GroupVersionResource
	Kind       string
	Namespaced bool
	// HasStatus tells whether the resource has a status subresource, so a
	// handler's status patch must be written there.
	HasStatus bool
}

// String is the resource as kubectl spells it: "secrets.v1." or
// "widgets.v1.test.tether.dev".
func (r Resource) String() string {
	return r.Resource + "." + r.Version + "." + r.Group
}

// Query is what a binding asks for. Either Resource or Kind must be set;
// Version may be empty for the group's preferred version.
type Query struct {
	Group, Version, Resource, Kind string
}

// ErrNotFound is returned when the API server serves nothing that matches.
var ErrNotFound = errors.New("resource not found")

// ErrUnavailable is returned when discovery failed to get an answer (the
// API server out of reach, a 5xx): no verdict on the query, which a retry
// may resolve.
var ErrUnavailable = errors.New("the API server did not answer discovery")

// Resolver resolves queries with discovery. It asks the API server each time,
// so custom resources created after the broker started are found.
type Resolver struct {
	Discovery discovery.DiscoveryInterface
}

// Resolve finds the resource a query names.
func (r *Resolver) Resolve(ctx context.Context, q Query) (Resource, error) {
	if q.Resource == "" && q.Kind == "" {
		return Resource{}, fmt.Errorf("resource or kind is required")
	}
	version := q.Version
	if version == "" {
		v, err := r.preferredVersion(q.Group)
		if err != nil {
			return Resource{}, err
		}
		version = v
	}
	gv := schema.GroupVersion{Group: q.Group, Version: version}
	list, err := r.Discovery.ServerResourcesForGroupVersion(gv.String())
	if err != nil {
		return Resource{}, fmt.Errorf("discovering %s: %w", gv, classify(err))
	}
	return pick(gv, list.APIResources, q)
}

func (r *Resolver) preferredVersion(group string) (string, error) {
	groups, err := r.Discovery.ServerGroups()
	if err != nil {
		return "", fmt.Errorf("discovering API groups: %w", classify(err))
	}
	for _, g := range groups.Groups {
		if g.Name == group {
			return g.PreferredVersion.Version, nil
		}
	}
	return "", fmt.Errorf("API group %q: %w", group, ErrNotFound)
}

func pick(gv schema.GroupVersion, list []metav1.APIResource, q Query) (Resource, error) {
	var found *metav1.APIResource
	for i := range list {
		ar := &list[i]
		if strings.Contains(ar.Name, "/") {
			continue
		}
		if (q.Resource != "" && ar.Name == q.Resource) || (q.Resource == "" && ar.Kind == q.Kind) {
			found = ar
			break
		}
	}
	if found == nil {
		what := q.Resource
		if what == "" {
			what = "kind " + q.Kind
		}
		return Resource{}, fmt.Errorf("%s in %s: %w", what, gv, ErrNotFound)
	}
	if q.Kind != "" && q.Resource != "" && found.Kind != q.Kind {
		return Resource{}, fmt.Errorf("%s in %s has kind %s, not %s", found.Name, gv, found.Kind, q.Kind)
	}
	if !slices.Contains(found.Verbs, "list") || !slices.Contains(found.Verbs, "watch") {
		return Resource{}, fmt.Errorf("%s in %s cannot be listed and watched", found.Name, gv)
	}
	res := Resource{
		GroupVersionResource: gv.WithResource(found.Name),
		Kind:                 found.Kind,
		Namespaced:           found.Namespaced,
	}
	for _, ar := range list {
		if ar.Name == found.Name+"/status" {
			res.HasStatus = true
		}
	}
	return res, nil
}

// classify tells a discovery error that answers the query (404: no such
// group or version) from one that only says no answer came.
func classify(err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
