package informer

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

var widgets = schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}

// answerServer answers every request with status and body.
func answerServer(t *testing.T, status int, body string) rest.Interface {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestListReportsTheAPIServersStatus(t *testing.T) {
	c := answerServer(t, http.StatusForbidden,
		`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,`+
			`"message":"widgets.test.tether.dev is forbidden: User \"b\" cannot list resource \"widgets\"",`+
			`"details":{"group":"test.tether.dev","kind":"widgets"}}`)
	lw := listWatch(c, Key{Resource: widgets, Namespace: "ns"}, func() {})
	_, err := lw.ListWithContext(context.Background(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot list resource "widgets"`) {
		t.Errorf("error %v, want the API server's Forbidden with its message", err)
	}
}
