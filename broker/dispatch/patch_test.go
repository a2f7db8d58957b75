package dispatch

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

	"github.com/tether-dev/tether/broker/informer"
)

var patchedWidgets = schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}

// patchedWidget is a Widget as the API server answers a patch, with the
// managedFields the cached form leaves out.
const patchedWidget = `{"apiVersion":"test.tether.dev/v1","kind":"Widget","metadata":{"name":"w","namespace":"ns",` +
	`"uid":"u1","resourceVersion":"17","finalizers":["tether.dev/h"],"managedFields":[{"manager":"tether-broker",` +
	`"operation":"Update"}]},"spec":{"size":3}}`

// patchTarget is an API server that answers the one request it gets with
// status and answer; the request and its body are kept for the test.
type patchTarget struct {
	req  *http.Request
	body string
}

func (pt *patchTarget) client(t *testing.T, status int, answer string) rest.Interface {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		pt.req, pt.body = r.Clone(context.Background()), string(b)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	c, err := informer.NewClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPatchReadsTheAnswerIntoItsCachedForm(t *testing.T) {
	var target patchTarget
	c := target.client(t, http.StatusOK, patchedWidget)
	body := `[{"op":"test","path":"/metadata/uid","value":"u1"}]`
	o, err := patch(context.Background(), c, patchedWidgets, "ns", "w", types.JSONPatchType, []byte(body),
		metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil {
		t.Fatal(err)
	}
	req := target.req
	if req.Method != http.MethodPatch || req.URL.Path != "/apis/test.tether.dev/v1/namespaces/ns/widgets/w/status" ||
		req.URL.Query().Get("fieldManager") != FieldManager || req.Header.Get("Content-Type") != string(types.JSONPatchType) {
		t.Errorf("request %s %s, Content-Type %q", req.Method, req.URL, req.Header.Get("Content-Type"))
	}
	if target.body != body {
		t.Errorf("body %s, want %s", target.body, body)
	}
	want, err := informer.Read([]byte(patchedWidget))
	if err != nil {
		t.Fatal(err)
	}
	if o == nil || o.UID != "u1" || o.ResourceVersion != "17" || string(o.Raw) != string(want.Raw) {
		t.Errorf("answer %+v, want %+v", o, want)
	}
}

// The error is the API server's Status, details and message included:
// the writer tells a lost race from a refusal by them.
func TestPatchReportsTheAPIServersStatus(t *testing.T) {
	var target patchTarget
	c := target.client(t, http.StatusUnprocessableEntity,
		`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422,`+
			`"message":"Widget.test.tether.dev \"w\" is invalid: spec.size: Invalid value: -1",`+
			`"details":{"name":"w","group":"test.tether.dev","kind":"Widget","causes":[{"reason":"FieldValueInvalid","field":"spec.size"}]}}`)
	_, err := patch(context.Background(), c, patchedWidgets, "ns", "w", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
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
	var target patchTarget
	c := target.client(t, http.StatusOK, `["not an object"]`)
	o, err := patch(context.Background(), c, patchedWidgets, "", "w", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
	if err != nil || o != nil {
		t.Errorf("patch = %v, %v; want no object and no error", o, err)
	}
}
