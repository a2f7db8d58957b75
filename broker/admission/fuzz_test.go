package admission

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// FuzzDecodeReview feeds bodies to the endpoint's decoder, as a caller with
// the signed path could: anything but a well-formed AdmissionReview with a
// request and a uid is refused with a 4xx, and nothing crashes.
func FuzzDecodeReview(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","object":{"a":1}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`))
	f.Add([]byte(`{"request":{"uid":"u","object":[1,2,3],"oldObject":"x"}}`))
	f.Add([]byte(`[`))
	s := &Server{opts: Options{MaxBodyBytes: 64 << 10}}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		review, code, err := s.decode(w, r)
		switch {
		case err != nil && (code < 400 || code > 499):
			t.Fatalf("refused with status %d: %v", code, err)
		case err == nil && (review.Request == nil || review.Request.UID == ""):
			t.Fatalf("took a review without a request uid: %s", body)
		}
	})
}

// FuzzCheckPatch feeds a mutating handler's patch, against an object, to
// the check that stands between it and the API server: it may refuse, but
// what it passes applies and keeps the object's identity.
func FuzzCheckPatch(f *testing.F) {
	obj := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"ns"},"data":{"a":"b"}}`)
	f.Add(obj, []byte(`[{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]`))
	f.Add(obj, []byte(`[{"op":"replace","path":"/metadata/name","value":"other"}]`))
	f.Add(obj, []byte(`[{"op":"copy","from":"/data","path":"/data2"},{"op":"copy","from":"/data2","path":"/data3"}]`))
	f.Add(obj, []byte(`[{"op":"move","from":"","path":"/x"}]`))
	f.Add([]byte(`[]`), []byte(`[{"op":"test","path":"","value":[]}]`))
	f.Fuzz(func(t *testing.T, object, patch []byte) {
		req := &admissionv1.AdmissionRequest{UID: "u", Object: runtime.RawExtension{Raw: object}}
		out, err := checkPatch(req, patch, 64<<10)
		if err != nil || out == nil {
			return
		}
		if again, err := checkPatch(req, out, 64<<10); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("a patch that passed does not pass again: %v", err)
		}
	})
}
