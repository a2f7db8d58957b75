package resource

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
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
	tests := resolves{
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
	checkResolves(t, NewResolver(Options{Discovery: fakeDiscovery()}), tests)
}

type resolves []struct {
	name string
	q    Query
	want Resource
}

// checkResolves runs each query of tests through r as a subtest.
func checkResolves(t *testing.T, r *Resolver, tests resolves) {
	t.Helper()
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
		{name: "neither resource nor kind", q: Query{Version: "v1"}, msg: "resource, kind or name is required"},
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
	r := NewResolver(Options{Discovery: fakeDiscovery()})
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
			_, err := NewResolver(Options{Discovery: d}).Resolve(context.Background(), tt.q)
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
	r := NewResolver(Options{Discovery: d})
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
			_, err := NewResolver(Options{Discovery: d}).Resolve(context.Background(), tt.q)
			if errors.Is(err, ErrUnavailable) != tt.unavailable || errors.Is(err, ErrNotFound) == tt.unavailable {
				t.Errorf("Resolve(%+v) = %v: ErrUnavailable %v, ErrNotFound %v; want ErrUnavailable %v",
					tt.q, err, errors.Is(err, ErrUnavailable), errors.Is(err, ErrNotFound), tt.unavailable)
			}
		})
	}
}

// namedDiscovery adds to fakeDiscovery what names are looked up in: short
// names and singulars, pods in a second group (as metrics.k8s.io serves
// them), and one name served by two custom groups.
func namedDiscovery() *fakediscovery.FakeDiscovery {
	d := fakeDiscovery()
	core := d.Resources[0].APIResources
	core[0].SingularName, core[0].ShortNames = "pod", []string{"po"}
	for _, l := range d.Resources[1:3] { // both versions of test.tether.dev
		l.APIResources[0].SingularName, l.APIResources[0].ShortNames = "widget", []string{"wdg"}
	}
	d.Resources = append(d.Resources,
		&metav1.APIResourceList{GroupVersion: "metrics.k8s.io/v1beta1", APIResources: []metav1.APIResource{
			{Name: "pods", SingularName: "pod", Kind: "PodMetrics", Namespaced: true, Verbs: []string{"get", "list"}},
		}},
		&metav1.APIResourceList{GroupVersion: "kopf.dev/v1", APIResources: []metav1.APIResource{
			{Name: "kopfexamples", SingularName: "kopfexample", ShortNames: []string{"kopfexes", "kex"}, Kind: "KopfExample", Namespaced: true, Verbs: listWatch},
			{Name: "kopfexamples/status", Kind: "KopfExample", Namespaced: true, Verbs: []string{"get", "patch"}},
			{Name: "gizmos", SingularName: "gizmo", Kind: "Gizmo", Verbs: listWatch},
		}},
		&metav1.APIResourceList{GroupVersion: "other.example.com/v1", APIResources: []metav1.APIResource{
			{Name: "gizmos", SingularName: "gizmo", Kind: "Gizmo", Verbs: listWatch},
		}},
	)
	return d
}

func TestResolveByName(t *testing.T) {
	kex := Resource{GroupVersionResource: gvr("kopf.dev", "v1", "kopfexamples"), Kind: "KopfExample", Namespaced: true, HasStatus: true}
	pods := Resource{GroupVersionResource: gvr("", "v1", "pods"), Kind: "Pod", Namespaced: true, HasStatus: true}
	tests := resolves{
		{"the plural in any group", Query{Name: "kopfexamples"}, kex},
		{"the singular", Query{Name: "kopfexample"}, kex},
		{"a short name", Query{Name: "kex"}, kex},
		{"another short name", Query{Name: "kopfexes"}, kex},
		{"the kind", Query{Name: "KopfExample"}, kex},
		{"the kind in lower case", Query{Name: "kopfExample"}, kex},
		{"with the group", Query{Group: "kopf.dev", Name: "kex"}, kex},
		{"with the group and version", Query{Group: "kopf.dev", Version: "v1", Name: "kopfexamples"}, kex},
		{"the core group wins a name it shares", Query{Name: "pods"}, pods},
		{"a core short name", Query{Name: "po"}, pods},
		{"a version without a group is the core group", Query{Version: "v1", Name: "pod"}, pods},
		{"a group's preferred version", Query{Name: "wdg"},
			Resource{GroupVersionResource: gvr("test.tether.dev", "v2", "widgets"), Kind: "Widget", Namespaced: true, HasStatus: true}},
		{"an older version of the group", Query{Group: "test.tether.dev", Version: "v1", Name: "widget"},
			Resource{GroupVersionResource: gvr("test.tether.dev", "v1", "widgets"), Kind: "Widget", Namespaced: true}},
		{"a name two groups share, narrowed by the group", Query{Group: "other.example.com", Name: "gizmos"},
			Resource{GroupVersionResource: gvr("other.example.com", "v1", "gizmos"), Kind: "Gizmo"}},
	}
	checkResolves(t, NewResolver(Options{Discovery: namedDiscovery()}), tests)
}

func TestResolveByNameRefuses(t *testing.T) {
	tests := []struct {
		name   string
		q      Query
		target error    // errors.Is
		msgs   []string // each in the error
	}{
		{"a name two custom groups share", Query{Name: "gizmo"}, ErrAmbiguous,
			[]string{"gizmos.v1.kopf.dev", "gizmos.v1.other.example.com", "name the group"}},
		{"an unknown name, with the close ones", Query{Name: "kopfexampel"}, ErrNotFound,
			[]string{`kopfexampel in any API group's preferred version`, "did you mean kopfexamples.v1.kopf.dev?"}},
		{"a name outside its group", Query{Group: "test.tether.dev", Name: "kex"}, ErrNotFound,
			[]string{"kex in test.tether.dev/v2", "did you mean kopfexamples.v1.kopf.dev?"}},
		{"a version the group does not serve", Query{Group: "kopf.dev", Version: "v2", Name: "kex"}, ErrNotFound,
			[]string{`API group "kopf.dev" serves no version "v2" (it serves v1)`}},
		{"a name with a resource", Query{Name: "kex", Resource: "kopfexamples"}, nil, []string{"give the name alone"}},
		{"a plural in the wrong case", Query{Group: "kopf.dev", Resource: "KopfExamples"}, ErrNotFound,
			[]string{"did you mean kopfexamples.v1.kopf.dev?"}},
	}
	r := NewResolver(Options{Discovery: namedDiscovery()})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.Resolve(context.Background(), tt.q)
			if err == nil {
				t.Fatalf("Resolve(%+v) = %+v, want an error", tt.q, got)
			}
			if tt.target != nil && !errors.Is(err, tt.target) {
				t.Errorf("error %q is not %v", err, tt.target)
			}
			for _, m := range tt.msgs {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not contain %q", err, m)
				}
			}
		})
	}
}

// countingDiscovery counts the times discovery is read in full.
func countingDiscovery(d *fakediscovery.FakeDiscovery) *int {
	n := new(int)
	d.PrependReactor("get", "group", func(clienttesting.Action) (bool, runtime.Object, error) {
		*n++
		return false, nil, nil
	})
	return n
}

func TestResolveKeepsASnapshot(t *testing.T) {
	d := fakeDiscovery()
	fetches := countingDiscovery(d)
	r := NewResolver(Options{Discovery: d})
	for range 5 {
		if _, err := r.Resolve(context.Background(), Query{Version: "v1", Resource: "secrets"}); err != nil {
			t.Fatal(err)
		}
	}
	if *fetches != 1 {
		t.Errorf("five queries it can answer read discovery %d times, want once", *fetches)
	}
}

// TestResolveRefreshesAtMostOncePerInterval: a flood of unknown names costs
// one discovery per MinRefresh, and a name created meanwhile is found once
// the interval is over.
func TestResolveRefreshesAtMostOncePerInterval(t *testing.T) {
	d := fakeDiscovery()
	fetches := countingDiscovery(d)
	clk := timerClock{FakeClock: clocktesting.NewFakeClock(time.Unix(1000, 0)), timers: make(chan struct{}, 1)}
	r := NewResolver(Options{Discovery: d, Clock: clk, MinRefresh: time.Second})
	ctx := context.Background()
	if _, err := r.Resolve(ctx, Query{Name: "secrets"}); err != nil {
		t.Fatal(err)
	}
	// A miss right after the first fetch waits for the interval to pass.
	clk.Step(time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, err := r.Resolve(ctx, Query{Name: "crons"})
		done <- err
	}()
	select {
	case <-clk.timers:
	case <-time.After(10 * time.Second):
		t.Fatal("the miss did not wait for the refresh interval")
	}
	if *fetches != 1 {
		t.Fatalf("the miss read discovery before the interval was over (%d reads)", *fetches)
	}
	d.Resources = append(d.Resources, &metav1.APIResourceList{
		GroupVersion: "late.tether.dev/v1",
		APIResources: []metav1.APIResource{{Name: "crons", Kind: "Cron", Namespaced: true, Verbs: listWatch}},
	})
	clk.Step(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("a name created before the refresh: %v", err)
	}
	if *fetches != 2 {
		t.Errorf("discovery read %d times, want 2", *fetches)
	}
}

// timerClock is a fake clock that says on timers when a timer is made, so
// a test can wait for the code under test to start waiting.
type timerClock struct {
	*clocktesting.FakeClock
	timers chan struct{}
}

func (c timerClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.timers <- struct{}{}
	return t
}

func TestResolveGivesUpWaitingWithItsContext(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	r := NewResolver(Options{Discovery: fakeDiscovery(), Clock: clk})
	if _, err := r.Resolve(context.Background(), Query{Name: "secrets"}); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Resolve(ctx, Query{Name: "nothing"}); !errors.Is(err, context.Canceled) {
		t.Errorf("a canceled query waiting for a refresh: %v", err)
	}
}
