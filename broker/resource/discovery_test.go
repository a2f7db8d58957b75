package resource

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"
)

// TestNewDiscoveryReadsTheAPIServersGroupsAndResources serves discovery as
// an API server does, with one aggregated API down: the resolver finds
// the core group's and a group's resources, and a query of the group that
// is down fails as unavailable, not as not found.
func TestNewDiscoveryReadsTheAPIServersGroupsAndResources(t *testing.T) {
	pages := map[string]string{
		"/api":    `{"kind":"APIVersions","versions":["v1"]}`,
		"/api/v1": `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"secrets","namespaced":true,"kind":"Secret","verbs":["get","list","watch"]}]}`,
		"/apis": `{"kind":"APIGroupList","groups":[` +
			`{"name":"test.tether.dev","versions":[{"groupVersion":"test.tether.dev/v1","version":"v1"}],"preferredVersion":{"groupVersion":"test.tether.dev/v1","version":"v1"}},` +
			`{"name":"metrics.k8s.io","versions":[{"groupVersion":"metrics.k8s.io/v1beta1","version":"v1beta1"}],"preferredVersion":{"groupVersion":"metrics.k8s.io/v1beta1","version":"v1beta1"}}]}`,
		"/apis/test.tether.dev/v1": `{"kind":"APIResourceList","groupVersion":"test.tether.dev/v1","resources":[{"name":"widgets","namespaced":true,"kind":"Widget","verbs":["get","list","watch"]}]}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page, ok := pages[r.URL.Path]
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(page))
	}))
	defer srv.Close()
	d, err := NewDiscovery(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r := NewResolver(Options{Discovery: d})
	ctx := context.Background()
	for _, q := range []Query{{Resource: "secrets"}, {Group: "test.tether.dev", Resource: "widgets"}} {
		got, err := r.Resolve(ctx, q)
		if err != nil {
			t.Fatalf("Resolve(%+v): %v", q, err)
		}
		if got.Resource != q.Resource || got.Group != q.Group || !got.Namespaced {
			t.Errorf("Resolve(%+v) = %+v", q, got)
		}
	}
	_, err = r.Resolve(ctx, Query{Group: "metrics.k8s.io", Resource: "pods"})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotFound) {
		t.Errorf("a group that is down: %v, want ErrUnavailable", err)
	}
}
