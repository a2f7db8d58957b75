package auth

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tether-dev/tether/broker/kube/kubetest"
)

// TestProtectAsksTokenReviewAndNonResourceAccess: a request reaches the
// protected handler only with a token the API server accepts and the
// identity's right to its method on its path as a non-resource URL; the
// answers are cached, so a scrape every few seconds costs no review.
func TestProtectAsksTokenReviewAndNonResourceAccess(t *testing.T) {
	var r reviewer
	c := r.client()
	var sars atomic.Int32
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sars.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		nr := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.ResourceAttributes == nil && nr != nil && nr.Path == "/metrics" && nr.Verb == "get" && sar.Spec.User == "alice"
		return true, sar, nil
	})
	a := New(Options{Client: kubetest.Wrap(c)})
	h := a.Protect(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("the metrics")) }))
	cases := []struct {
		name, path, token string
		code              int
		body              string
		sars              int32 // in all, after the case
	}{
		{"no token", "/metrics", "", http.StatusUnauthorized, "a bearer token is required", 0},
		{"a token the API server refuses", "/metrics", "forged", http.StatusUnauthorized, "bad signature", 0},
		{"alice may get /metrics", "/metrics", "good", http.StatusOK, "the metrics", 1},
		{"again: from the cache", "/metrics", "good", http.StatusOK, "the metrics", 1},
		{"alice may not get another path", "/debug", "good", http.StatusForbidden, "alice may not get /debug", 2},
	}
	for _, tc := range cases {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.name, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
		if n := sars.Load(); n != tc.sars {
			t.Errorf("%s: %d SubjectAccessReviews in all, want %d", tc.name, n, tc.sars)
		}
	}
}
