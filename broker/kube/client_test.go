package kube

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// TestTheClientMakesTheClientsetsRequests: each call is the request
// client-go's clientset makes for it (method, path, query, content type),
// and the answer is decoded into the typed object; an error Status comes
// back as the API error.
func TestTheClientMakesTheClientsetsRequests(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Content-Type")+" "+strings.TrimSpace(string(body)))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/missing"):
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
		case strings.HasSuffix(r.URL.Path, "/leases"):
			_, _ = w.Write([]byte(`{"kind":"LeaseList","apiVersion":"coordination.k8s.io/v1","items":[{"metadata":{"name":"a"}}]}`))
		default:
			_, _ = w.Write([]byte(`{"metadata":{"name":"a","resourceVersion":"7"}}`))
		}
	}))
	defer srv.Close()
	c, err := NewForConfig(&rest.Config{Host: srv.URL, QPS: 100, Burst: 100})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	leases := c.CoordinationV1().Leases("ns")
	if l, err := leases.Get(ctx, "a", metav1.GetOptions{}); err != nil || l.ResourceVersion != "7" {
		t.Errorf("Get: %+v, %v", l, err)
	}
	if l, err := leases.List(ctx, metav1.ListOptions{LabelSelector: "x=y"}); err != nil || len(l.Items) != 1 {
		t.Errorf("List: %+v, %v", l, err)
	}
	if _, err := leases.Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.UpdateOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := leases.Patch(ctx, "a", types.JSONPatchType, []byte(`[]`), metav1.PatchOptions{}); err != nil {
		t.Error(err)
	}
	if err := leases.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, metav1.CreateOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := c.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{}, metav1.CreateOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := (EventSink{Client: c}).Patch(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ns"}}, []byte(`{}`)); err != nil {
		t.Error(err)
	}
	if _, err := c.CoreV1().Secrets("ns").Get(ctx, "missing", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a 404: %v, want the API's not found", err)
	}
	want := []string{
		"GET /apis/coordination.k8s.io/v1/namespaces/ns/leases/a  ",
		"GET /apis/coordination.k8s.io/v1/namespaces/ns/leases?labelSelector=x%3Dy  ",
		`PUT /apis/coordination.k8s.io/v1/namespaces/ns/leases/a application/json {"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"a"},"spec":{}}`,
		"PATCH /apis/coordination.k8s.io/v1/namespaces/ns/leases/a application/json-patch+json []",
		`DELETE /apis/coordination.k8s.io/v1/namespaces/ns/leases/a application/json {"kind":"DeleteOptions","apiVersion":"coordination.k8s.io/v1"}`,
		`POST /api/v1/namespaces application/json {"kind":"Namespace","apiVersion":"v1","metadata":{"name":"n"},"spec":{},"status":{}}`,
		`POST /apis/authentication.k8s.io/v1/tokenreviews application/json {"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","metadata":{},"spec":{},"status":{"user":{}}}`,
		"PATCH /api/v1/namespaces/ns/events/e application/strategic-merge-patch+json {}",
		"GET /api/v1/namespaces/ns/secrets/missing  ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
