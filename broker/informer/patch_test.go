package informer

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

var widgets = schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}

// patchServer answers every request with status and body, and records the
// last request and its body.
func patchServer(t *testing.T, status int, body string) (rest.Interface, *http.Request, *string) {
	t.Helper()
	var got http.Request
	var gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, gotBody = *r.Clone(context.Background()), string(b)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c, &got, &gotBody
}

func TestPatchReadsTheAnswerIntoItsCachedForm(t *testing.T) {
	c, req, body := patchServer(t, http.StatusOK, served)
	patch := `[{"op":"test","path":"/metadata/uid","value":"u1"}]`
	o, err := Patch(context.Background(), c, widgets, "ns", "w", types.JSONPatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: "tether-broker"}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if req.Method != http.MethodPatch || req.URL.Path != "/apis/test.tether.dev/v1/namespaces/ns/widgets/w/status" ||
		req.URL.Query().Get("fieldManager") != "tether-broker" || req.Header.Get("Content-Type") != string(types.JSONPatchType) {
		t.Errorf("request %s %s, Content-Type %q", req.Method, req.URL, req.Header.Get("Content-Type"))
	}
	if *body != patch {
		t.Errorf("body %s, want %s", *body, patch)
	}
	want, err := fromJSON([]byte(served))
	if err != nil {
		t.Fatal(err)
	}
	if o == nil || o.UID != "u1" || o.ResourceVersion != "17" || string(o.Raw) != string(want.Raw) {
		t.Errorf("answer %+v, want %+v", o, want)
	}
}

// The error is the API server's Status, details and message included:
// dispatch tells a lost race from a refusal by them.
func TestPatchReportsTheAPIServersStatus(t *testing.T) {
	c, _, _ := patchServer(t, http.StatusUnprocessableEntity,
		`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422,`+
			`"message":"Widget.test.tether.dev \"w\" is invalid: spec.size: Invalid value: -1",`+
			`"details":{"name":"w","group":"test.tether.dev","kind":"Widget","causes":[{"reason":"FieldValueInvalid","field":"spec.size"}]}}`)
	_, err := Patch(context.Background(), c, widgets, "ns", "w", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
	var st apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &st) {
		t.Fatalf("error %v, want the Status of an Invalid", err)
	}
	if d := st.Status().Details; d == nil || d.Name != "w" || len(d.Causes) != 1 || !strings.Contains(err.Error(), "spec.size") {
		t.Errorf("error %q, details %+v: the Status's details and message are lost", err, d)
	}
}

// A patch that landed is not an error because its answer was unreadable:
// retried, it would be written twice.
func TestPatchThatLandedWithAnUnreadableAnswerIsNoError(t *testing.T) {
	c, _, _ := patchServer(t, http.StatusOK, `["not an object"]`)
	o, err := Patch(context.Background(), c, widgets, "", "w", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
	if err != nil || o != nil {
		t.Errorf("Patch = %v, %v; want no object and no error", o, err)
	}
}

func TestListReportsTheAPIServersStatus(t *testing.T) {
	c, _, _ := patchServer(t, http.StatusForbidden,
		`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,`+
			`"message":"widgets.test.tether.dev is forbidden: User \"b\" cannot list resource \"widgets\"",`+
			`"details":{"group":"test.tether.dev","kind":"widgets"}}`)
	lw := listWatch(c, Key{Resource: widgets, Namespace: "ns"}, func() {})
	_, err := lw.ListWithContext(context.Background(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot list resource "widgets"`) {
		t.Errorf("error %v, want the API server's Forbidden with its message", err)
	}
}
