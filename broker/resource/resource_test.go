package resource

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

var listWatch = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// fakeDiscovery serves the core group, a custom group with two versions (v2 is
// listed first, so it is the preferred one) and a few odd resources.
func fakeDiscovery() *fakediscovery.FakeDiscovery {
	fake := &clienttesting.Fake{}
	fake.Resources = []*metav1.APIResourceList{
		{
			GroupVersion: "v1",
			APIResources: []metav1.APIResource{
				{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: listWatch},
				{Name: "pods/status", Kind: "Pod", Namespaced: true, Verbs: []string{"get", "patch", "update"}},
				{Name: "pods/log", Kind: "Pod", Namespaced: true, Verbs: []string{"get"}},
				{Name: "secrets", Kind: "Secret", Namespaced: true, Verbs: listWatch},
				{Name: "namespaces", Kind: "Namespace", Verbs: listWatch},
				{Name: "namespaces/status", Kind: "Namespace", Verbs: []string{"get", "patch", "update"}},
				{Name: "bindings", Kind: "Binding", Namespaced: true, Verbs: []string{"create"}},
				{Name: "componentstatuses", Kind: "ComponentStatus", Verbs: []string{"get", "list"}},
			},
		},
		{
			GroupVersion: "test.tether.dev/v2",
			APIResources: []metav1.APIResource{
				{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: listWatch},
				{Name: "widgets/status", Kind: "Widget", Namespaced: true, Verbs: []string{"get", "patch", "update"}},
			},
		},
		{
			GroupVersion: "test.tether.dev/v1",
			APIResources: []metav1.APIResource{
				{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: listWatch},
				{Name: "gadgets", Kind: "Gadget", Verbs: listWatch},
			},
		},
	}
	return &fakediscovery.FakeDiscovery{Fake: fake}
}

func gvr(group, version, resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name string
		q    Query
		want Resource
	}{
		{
			name: "by resource",
			q:    Query{Version: "v1", Resource: "secrets"},
			want: Resource{GroupVersionResource: gvr("", "v1", "secrets"), Kind: "Secret", Namespaced: true},
		},
		{
			name: "by kind",
			q:    Query{Version: "v1", Kind: "Secret"},
			want: Resource{GroupVersionResource: gvr("", "v1", "secrets"), Kind: "Secret", Namespaced: true},
		},
		{
			name: "by resource and a kind that agrees",
			q:    Query{Version: "v1", Resource: "secrets", Kind: "Secret"},
			want: Resource{GroupVersionResource: gvr("", "v1", "secrets"), Kind: "Secret", Namespaced: true},
		},
		{
			name: "by kind never picks a subresource",
			q:    Query{Version: "v1", Kind: "Pod"},
			want: Resource{GroupVersionResource: gvr("", "v1", "pods"), Kind: "Pod", Namespaced: true, HasStatus: true},
		},
		{
			name: "a status subresource sets HasStatus",
			q:    Query{Version: "v1", Resource: "pods"},
			want: Resource{GroupVersionResource: gvr("", "v1", "pods"), Kind: "Pod", Namespaced: true, HasStatus: true},
		},
		{
			name: "cluster-scoped with status",
			q:    Query{Version: "v1", Resource: "namespaces"},
			want: Resource{GroupVersionResource: gvr("", "v1", "namespaces"), Kind: "Namespace", HasStatus: true},
		},
		{
			name: "the preferred version when the version is empty",
			q:    Query{Group: "test.tether.dev", Resource: "widgets"},
			want: Resource{GroupVersionResource: gvr("test.tether.dev", "v2", "widgets"), Kind: "Widget", Namespaced: true, HasStatus: true},
		},
		{
			name: "the core group's preferred version",
			q:    Query{Kind: "Secret"},
			want: Resource{GroupVersionResource: gvr("", "v1", "secrets"), Kind: "Secret", Namespaced: true},
		},
		{
			name: "an explicit older version",
			q:    Query{Group: "test.tether.dev", Version: "v1", Resource: "widgets"},
			want: Resource{GroupVersionResource: gvr("test.tether.dev", "v1", "widgets"), Kind: "Widget", Namespaced: true},
		},
		{
			name: "a custom cluster-scoped resource by kind",
			q:    Query{Group: "test.tether.dev", Version: "v1", Kind: "Gadget"},
			want: Resource{GroupVersionResource: gvr("test.tether.dev", "v1", "gadgets"), Kind: "Gadget"},
		},
	}
	r := &Resolver{Discovery: fakeDiscovery()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.Resolve(context.Background(), tt.q)
			if err != nil {
				t.Fatalf("Resolve(%+v): %v", tt.q, err)
			}
			if got != tt.want {
				t.Errorf("Resolve(%+v)\n got %+v\nwant %+v", tt.q, got, tt.want)
			}
		})
	}
}

func TestResolveRefuses(t *testing.T) {
	tests := []struct {
		name     string
		q        Query
		notFound bool   // errors.Is(err, ErrNotFound)
		msg      string // in the error
	}{
		{name: "neither resource nor kind", q: Query{Version: "v1"}, msg: "resource or kind is required"},
		{name: "an unknown resource", q: Query{Version: "v1", Resource: "gizmos"}, notFound: true, msg: "gizmos"},
		{name: "an unknown kind", q: Query{Version: "v1", Kind: "Gizmo"}, notFound: true, msg: "kind Gizmo"},
		{name: "a kind in another group", q: Query{Version: "v1", Kind: "Widget"}, notFound: true},
		{name: "an unknown version", q: Query{Version: "v9", Resource: "secrets"}, notFound: true, msg: "v9"},
		{name: "an unknown group", q: Query{Group: "nope.io", Resource: "things"}, notFound: true, msg: "nope.io"},
		{name: "an unknown group and version", q: Query{Group: "nope.io", Version: "v1", Resource: "things"}, notFound: true},
		{name: "a subresource by name", q: Query{Version: "v1", Resource: "pods/status"}, notFound: true},
		{name: "a resource missing from the preferred version", q: Query{Group: "test.tether.dev", Resource: "gadgets"}, notFound: true},
		{name: "a kind that disagrees with the resource", q: Query{Version: "v1", Resource: "secrets", Kind: "ConfigMap"}, msg: "has kind Secret, not ConfigMap"},
		{name: "no list or watch verbs", q: Query{Version: "v1", Resource: "bindings"}, msg: "cannot be listed and watched"},
		{name: "list but no watch", q: Query{Version: "v1", Resource: "componentstatuses"}, msg: "cannot be listed and watched"},
	}
	r := &Resolver{Discovery: fakeDiscovery()}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.Resolve(context.Background(), tt.q)
			if err == nil {
				t.Fatalf("Resolve(%+v) = %+v, want an error", tt.q, got)
			}
			if errors.Is(err, ErrNotFound) != tt.notFound {
				t.Errorf("errors.Is(%q, ErrNotFound) = %v, want %v", err, !tt.notFound, tt.notFound)
			}
			if tt.msg != "" && !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
		})
	}
}

func TestResolvePassesDiscoveryFailuresOn(t *testing.T) {
	down := errors.New("connection refused")
	tests := []struct {
		name     string
		resource string // the discovery call that fails: "group" or "resource"
		q        Query
	}{
		{"listing groups", "group", Query{Resource: "secrets"}},
		{"listing resources", "resource", Query{Version: "v1", Resource: "secrets"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := fakeDiscovery()
			d.PrependReactor("get", tt.resource, func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, down
			})
			_, err := (&Resolver{Discovery: d}).Resolve(context.Background(), tt.q)
			if !errors.Is(err, down) {
				t.Errorf("error %v does not wrap the discovery failure", err)
			}
			if errors.Is(err, ErrNotFound) {
				t.Errorf("a discovery failure %v is reported as not found", err)
			}
		})
	}
}

func TestResolveSeesResourcesAddedLater(t *testing.T) {
	d := fakeDiscovery()
	r := &Resolver{Discovery: d}
	q := Query{Group: "late.tether.dev", Resource: "crons"}
	if _, err := r.Resolve(context.Background(), q); !errors.Is(err, ErrNotFound) {
		t.Fatalf("before the CRD: %v", err)
	}
	d.Resources = append(d.Resources, &metav1.APIResourceList{
		GroupVersion: "late.tether.dev/v1alpha1",
		APIResources: []metav1.APIResource{{Name: "crons", Kind: "Cron", Namespaced: true, Verbs: listWatch}},
	})
	got, err := r.Resolve(context.Background(), q)
	if err != nil {
		t.Fatalf("after the CRD: %v", err)
	}
	if got.GroupVersionResource != gvr("late.tether.dev", "v1alpha1", "crons") {
		t.Errorf("got %+v", got)
	}
}

func TestResourceString(t *testing.T) {
	tests := []struct {
		r    Resource
		want string
	}{
		{Resource{GroupVersionResource: gvr("", "v1", "secrets")}, "secrets.v1."},
		{Resource{GroupVersionResource: gvr("test.tether.dev", "v1", "widgets")}, "widgets.v1.test.tether.dev"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

// TestResolveWithoutAnAnswerIsUnavailable: when discovery gets no answer
// (a connection refused, a 503), Resolve says so with ErrUnavailable, not
// ErrNotFound: the query is not wrong, and the session asks the handler to
// retry rather than rejecting it. A 404 is an answer.
func TestResolveWithoutAnAnswerIsUnavailable(t *testing.T) {
	refused := errors.New(`Get "https://127.0.0.1:6443/apis/test.tether.dev/v1": dial tcp 127.0.0.1:6443: connect: connection refused`)
	tests := []struct {
		name        string
		err         error
		q           Query
		unavailable bool
	}{
		{"a refused connection", refused, Query{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}, true},
		{"a refused connection while finding the preferred version", refused, Query{Group: "test.tether.dev", Resource: "widgets"}, true},
		{"a 503", apierrors.NewServiceUnavailable("aggregated API down"), Query{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}, true},
		{"a 404 is an answer", apierrors.NewNotFound(schema.GroupResource{}, "test.tether.dev/v1"), Query{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := fakeDiscovery()
			d.PrependReactor("get", "*", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tt.err })
			_, err := (&Resolver{Discovery: d}).Resolve(context.Background(), tt.q)
			if errors.Is(err, ErrUnavailable) != tt.unavailable || errors.Is(err, ErrNotFound) == tt.unavailable {
				t.Errorf("Resolve(%+v) = %v: ErrUnavailable %v, ErrNotFound %v; want ErrUnavailable %v",
					tt.q, err, errors.Is(err, ErrUnavailable), errors.Is(err, ErrNotFound), tt.unavailable)
			}
		})
	}
}
