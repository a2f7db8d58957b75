package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/metrics"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// reviewFunc is a Reviewer that knows every binding, as a validate binding
// with the default timeout.
type reviewFunc func(ctx context.Context, handler, bindingID string, req *admissionv1.AdmissionRequest) (*tetherv1.AdmissionResponse, *binding.Binding, error)

func (f reviewFunc) Review(ctx context.Context, handler, bindingID string, req *admissionv1.AdmissionRequest) (*tetherv1.AdmissionResponse, *binding.Binding, error) {
	return f(ctx, handler, bindingID, req)
}

func (f reviewFunc) Binding(_, bindingID string) *binding.Binding {
	return &binding.Binding{ID: bindingID, Kind: binding.Validate}
}

// lookupReviewer is a reviewFunc whose Binding is b, or what lookup says.
type lookupReviewer struct {
	reviewFunc
	b      *binding.Binding
	lookup func(handler, bindingID string) *binding.Binding
}

func (l lookupReviewer) Binding(handler, bindingID string) *binding.Binding {
	if l.lookup != nil {
		return l.lookup(handler, bindingID)
	}
	return l.b
}

// testPaths signs the paths of these tests.
var testPaths = func() *PathKey {
	k, err := NewPathKey(bytes.Repeat([]byte{7}, PathKeySize))
	if err != nil {
		panic(err)
	}
	return k
}()

func admissionBinding(id string, kind binding.Kind, policy string) *binding.Binding {
	return &binding.Binding{ID: id, Kind: kind, Admission: binding.AdmissionOptions{
		Operations: []string{binding.OpCreate}, FailurePolicy: policy, Timeout: 10 * time.Second,
	}}
}

const testObject = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"ns"},"data":{"a":"b"}}`

// reviewBody is an AdmissionReview of a CREATE of obj.
func reviewBody(t *testing.T, obj string) []byte {
	t.Helper()
	review := admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
		UID: "review-1", Operation: admissionv1.Create, Namespace: "ns", Name: "cm",
		Object: runtime.RawExtension{Raw: []byte(obj)},
	}}
	review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
	data, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// testServer is a started Server and a client that trusts it.
type testServer struct {
	base   string
	client *http.Client
	reg    *prometheus.Registry
}

// startServer serves reviews with r on 127.0.0.1 until the test ends, and
// checks that nothing is left running then.
func startServer(t *testing.T, r Reviewer, maxBody int64, maxPerHandler int) *testServer {
	t.Helper()
	return startServerWith(t, r, func(o *Options) { o.MaxBodyBytes, o.MaxReviewsPerHandler = maxBody, maxPerHandler })
}

// startServerWith is startServer with the options set sets.
func startServerWith(t *testing.T, r Reviewer, set func(*Options)) *testServer {
	t.Helper()
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
	certs := testCerts(t)
	reg := prometheus.NewRegistry()
	opts := Options{Log: testLogger(t), Reviewer: r, Listen: "127.0.0.1:0", Certs: certs, Paths: testPaths, Metrics: metrics.New(reg)}
	set(&opts)
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool(t, certs.CABundle())}}}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
		client.CloseIdleConnections()
	})
	return &testServer{base: "https://" + srv.Addr().String(), client: client, reg: reg}
}

// post sends body to path and returns the status, the decoded review (when
// 200) and the body as text. A path /admit/<handler>/<binding>[?query] is
// signed first, as the webhook configurations have it; others go as they
// are.
func (s *testServer) post(t *testing.T, method, path string, body []byte) (int, *admissionv1.AdmissionReview, string) {
	t.Helper()
	p, query, _ := strings.Cut(path, "?")
	if rest, ok := strings.CutPrefix(p, PathPrefix); ok {
		if h, b, ok := strings.Cut(rest, "/"); ok && h != "" && b != "" && !strings.Contains(b, "/") {
			path = testPaths.Path(h, b)
			if query != "" {
				path += "?" + query
			}
		}
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, string(data)
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(data, review); err != nil {
		t.Fatalf("decoding the answer %s: %v", data, err)
	}
	return resp.StatusCode, review, string(data)
}

// postAsync posts body to handler's binding "b" in a goroutine and sends
// the answer's status on done (0 when the request failed).
func (s *testServer) postAsync(handler string, body []byte, done chan<- int) {
	go func() {
		resp, err := s.client.Post(s.base+testPaths.Path(handler, "b"), "application/json", bytes.NewReader(body))
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
}

// metricValue is the value of a counter, or the sample count of a
// histogram, with the given labels; 0 when there is none.
func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue next
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func TestReviewAnswers(t *testing.T) {
	answer := func(resp *tetherv1.AdmissionResponse) func(context.Context) (*tetherv1.AdmissionResponse, error) {
		return func(context.Context) (*tetherv1.AdmissionResponse, error) { return resp, nil }
	}
	slow := func(ctx context.Context) (*tetherv1.AdmissionResponse, error) {
		<-ctx.Done()
		return nil, fmt.Errorf("waiting for the handler: %w", ctx.Err())
	}
	handlers := map[string]struct {
		b      *binding.Binding
		answer func(context.Context) (*tetherv1.AdmissionResponse, error)
	}{
		"allow": {admissionBinding("allow", binding.Validate, binding.FailFail),
			answer(&tetherv1.AdmissionResponse{Allowed: true, Warnings: []string{"looks odd"}})},
		"deny": {admissionBinding("deny", binding.Validate, binding.FailFail),
			answer(&tetherv1.AdmissionResponse{Message: "the owner annotation is missing"})},
		"deny-422": {admissionBinding("deny-422", binding.Validate, binding.FailFail),
			answer(&tetherv1.AdmissionResponse{Message: "bad spec", Code: 422})},
		"patch": {admissionBinding("patch", binding.Mutate, binding.FailFail),
			answer(&tetherv1.AdmissionResponse{Allowed: true, Patch: []byte(`[{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]`)})},
		"empty-patch": {admissionBinding("empty-patch", binding.Mutate, binding.FailFail),
			answer(&tetherv1.AdmissionResponse{Allowed: true, Patch: []byte(" [] ")})},
		"patch-not-apply": {admissionBinding("patch-not-apply", binding.Mutate, binding.FailIgnore),
			answer(&tetherv1.AdmissionResponse{Allowed: true, Patch: []byte(`[{"op":"replace","path":"/spec/replicas","value":1}]`)})},
		"patch-not-json-patch": {admissionBinding("patch-not-json-patch", binding.Mutate, binding.FailFail),
			answer(&tetherv1.AdmissionResponse{Allowed: true, Patch: []byte(`{"metadata":{}}`)})},
		"patch-rename": {admissionBinding("patch-rename", binding.Mutate, binding.FailFail),
			answer(&tetherv1.AdmissionResponse{Allowed: true, Patch: []byte(`[{"op":"replace","path":"/metadata/name","value":"other"}]`)})},
		"patch-not-object": {admissionBinding("patch-not-object", binding.Mutate, binding.FailFail),
			answer(&tetherv1.AdmissionResponse{Allowed: true, Patch: []byte(`[{"op":"replace","path":"","value":[1]}]`)})},
		"validate-patch": {admissionBinding("validate-patch", binding.Validate, binding.FailFail),
			answer(&tetherv1.AdmissionResponse{Allowed: true, Patch: []byte(`[{"op":"add","path":"/data/c","value":"d"}]`)})},
		"no-response": {admissionBinding("no-response", binding.Validate, binding.FailFail), answer(nil)},
		"slow-fail":   {admissionBinding("slow-fail", binding.Validate, binding.FailFail), slow},
		"slow-ignore": {admissionBinding("slow-ignore", binding.Mutate, binding.FailIgnore), slow},
		"no-instance": {admissionBinding("no-instance", binding.Validate, binding.FailFail),
			func(context.Context) (*tetherv1.AdmissionResponse, error) {
				return nil, fmt.Errorf("reviewing: %w", ErrNoInstance)
			}},
		"no-instance-in-time": {admissionBinding("no-instance-in-time", binding.Validate, binding.FailIgnore),
			func(ctx context.Context) (*tetherv1.AdmissionResponse, error) {
				<-ctx.Done()
				return nil, fmt.Errorf("%w: %w", ErrNoInstance, ctx.Err())
			}},
		"not-admission": {&binding.Binding{ID: "not-admission", Kind: binding.Create}, answer(&tetherv1.AdmissionResponse{Allowed: true})},
	}
	reviewer := reviewFunc(func(ctx context.Context, handler, id string, req *admissionv1.AdmissionRequest) (*tetherv1.AdmissionResponse, *binding.Binding, error) {
		h, ok := handlers[id]
		if handler != "h" || !ok {
			return nil, nil, errors.New("no such binding")
		}
		if req.UID != "review-1" || string(req.Object.Raw) != testObject {
			return nil, h.b, fmt.Errorf("the reviewer got the request %+v", req)
		}
		resp, err := h.answer(ctx)
		return resp, h.b, err
	})
	lookup := func(handler, id string) *binding.Binding {
		if h, ok := handlers[id]; ok && handler == "h" {
			return h.b
		}
		return nil
	}
	s := startServer(t, lookupReviewer{reviewFunc: reviewer, lookup: lookup}, 64<<10, 0)
	valid := reviewBody(t, testObject)
	noRequest := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`)
	v1beta1 := bytes.Replace(valid, []byte("admission.k8s.io/v1"), []byte("admission.k8s.io/v1beta1"), 1)

	for _, c := range []struct {
		name, method, path string
		body               []byte
		wantHTTP           int
		wantBody           string // a substring of the body, for errors
		wantAllowed        bool
		wantCode           int32
		wantMessage        string // a substring
		wantWarning        string // a substring of the only warning
		wantPatch          string
	}{
		{name: "allow with warnings", path: "/admit/h/allow", wantAllowed: true, wantWarning: "looks odd"},
		{name: "deny gets 403", path: "/admit/h/deny", wantCode: 403, wantMessage: "the owner annotation is missing"},
		{name: "deny with code", path: "/admit/h/deny-422", wantCode: 422, wantMessage: "bad spec"},
		{name: "valid patch", path: "/admit/h/patch", wantAllowed: true,
			wantPatch: `[{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]`},
		{name: "empty patch is none", path: "/admit/h/empty-patch", wantAllowed: true},
		{name: "patch that does not apply, Ignore", path: "/admit/h/patch-not-apply", wantAllowed: true,
			wantWarning: `handler "h" (binding "patch-not-apply") failed: the handler's answer is not a valid admission response: invalid patch: the patch does not apply`},
		{name: "not a JSON patch", path: "/admit/h/patch-not-json-patch", wantCode: 500, wantMessage: "not an RFC 6902 JSON patch"},
		{name: "patch that renames", path: "/admit/h/patch-rename", wantCode: 500,
			wantMessage: `the patch changes metadata.name from "cm" to "other"`},
		{name: "patch of the whole object", path: "/admit/h/patch-not-object", wantCode: 500, wantMessage: "operation 0 (replace) is on the whole object"},
		{name: "validate with a patch", path: "/admit/h/validate-patch", wantCode: 500,
			wantMessage: "a validate binding answered with a patch"},
		{name: "no admission response", path: "/admit/h/no-response", wantCode: 500, wantMessage: "without an admission response"},
		{name: "timeout, Fail", path: "/admit/h/slow-fail?timeout=1s", wantCode: 504,
			wantMessage: `tether: the admission webhook of handler "h" (binding "slow-fail") failed: the handler did not answer within 800ms`},
		{name: "timeout, Ignore", path: "/admit/h/slow-ignore?timeout=1s", wantAllowed: true,
			wantWarning: "the handler did not answer within 800ms; the request was admitted (failure policy Ignore)"},
		{name: "no instance", path: "/admit/h/no-instance", wantCode: 500, wantMessage: "no instance of the handler is connected"},
		{name: "no instance in time", path: "/admit/h/no-instance-in-time?timeout=1s", wantAllowed: true,
			wantWarning: "no instance of the handler connected within 800ms"},
		{name: "unknown binding", path: "/admit/h/nope", wantHTTP: 503, wantBody: `handler "h" has no binding "nope" on this broker`},
		{name: "unknown handler", path: "/admit/other/allow", wantHTTP: 503, wantBody: `handler "other" has no binding "allow"`},
		{name: "not an admission binding", path: "/admit/h/not-admission", wantHTTP: 404, wantBody: "is a create binding"},
		{name: "garbage", path: "/admit/h/allow", body: []byte("{not json"), wantHTTP: 400, wantBody: "not a JSON AdmissionReview"},
		{name: "no request", path: "/admit/h/allow", body: noRequest, wantHTTP: 400, wantBody: "has no request"},
		{name: "v1beta1", path: "/admit/h/allow", body: v1beta1, wantHTTP: 400, wantBody: "expected an AdmissionReview of admission.k8s.io/v1"},
		{name: "GET", method: http.MethodGet, path: "/admit/h/allow", wantHTTP: 405, wantBody: "method GET not allowed"},
		{name: "oversized", path: "/admit/h/allow", body: bytes.Repeat([]byte(" "), 100<<10), wantHTTP: 413, wantBody: "larger than 65536 bytes"},
		{name: "bad path", path: "/admit/h", wantHTTP: 404},
		{name: "a wrong signature", path: "/admit/h/allow/" + testPaths.sign("h", "deny"), wantHTTP: 404, wantBody: "404 page not found"},
		{name: "path too deep", path: testPaths.Path("h", "allow") + "/more", wantHTTP: 404},
		{name: "other path", path: "/healthz", wantHTTP: 404},
		{name: "bad timeout", path: "/admit/h/allow?timeout=soon", wantHTTP: 400, wantBody: `the timeout parameter "soon"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			method, body, wantHTTP := c.method, c.body, c.wantHTTP
			if method == "" {
				method = http.MethodPost
			}
			if body == nil {
				body = valid
			}
			if wantHTTP == 0 {
				wantHTTP = http.StatusOK
			}
			status, review, text := s.post(t, method, c.path, body)
			if status != wantHTTP || !strings.Contains(text, c.wantBody) {
				t.Fatalf("got %d %q, want %d with %q", status, text, wantHTTP, c.wantBody)
			}
			if status != http.StatusOK {
				return
			}
			if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" || review.Response == nil {
				t.Fatalf("not an AdmissionReview response: %s", text)
			}
			r := review.Response
			if r.UID != "review-1" || r.Allowed != c.wantAllowed {
				t.Errorf("uid %q allowed %v, want review-1 %v (%s)", r.UID, r.Allowed, c.wantAllowed, text)
			}
			var code int32
			var msg string
			if r.Result != nil {
				code, msg = r.Result.Code, r.Result.Message
			}
			if code != c.wantCode || !strings.Contains(msg, c.wantMessage) {
				t.Errorf("status %d %q, want %d with %q", code, msg, c.wantCode, c.wantMessage)
			}
			switch {
			case c.wantWarning == "" && len(r.Warnings) != 0:
				t.Errorf("warnings %q, want none", r.Warnings)
			case c.wantWarning != "" && (len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], c.wantWarning)):
				t.Errorf("warnings %q, want one with %q", r.Warnings, c.wantWarning)
			}
			if string(r.Patch) != c.wantPatch {
				t.Errorf("patch %q, want %q", r.Patch, c.wantPatch)
			}
			if hasPatchType := r.PatchType != nil && *r.PatchType == admissionv1.PatchTypeJSONPatch; hasPatchType != (c.wantPatch != "") {
				t.Errorf("patchType %v with patch %q", r.PatchType, r.Patch)
			}
		})
	}

	for _, m := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"tether_admission_review_duration_seconds", map[string]string{"handler": "h", "binding": "allow", "result": "allowed"}, 1},
		{"tether_admission_review_duration_seconds", map[string]string{"handler": "h", "binding": "deny", "result": "denied"}, 1},
		{"tether_admission_review_duration_seconds", map[string]string{"handler": "h", "binding": "slow-fail", "result": "error"}, 1},
		{"tether_admission_review_duration_seconds", map[string]string{"binding": "nope"}, 0},
		{"tether_admission_failures_total", map[string]string{"handler": "h", "binding": "slow-fail", "policy": "Fail", "reason": "timeout"}, 1},
		{"tether_admission_failures_total", map[string]string{"handler": "h", "binding": "slow-ignore", "policy": "Ignore", "reason": "timeout"}, 1},
		{"tether_admission_failures_total", map[string]string{"handler": "h", "binding": "patch-not-apply", "policy": "Ignore", "reason": "invalid-response"}, 1},
		{"tether_admission_failures_total", map[string]string{"handler": "h", "binding": "no-instance", "policy": "Fail", "reason": "no-instance"}, 1},
		{"tether_admission_failures_total", map[string]string{"handler": "h", "binding": "no-instance-in-time", "policy": "Ignore", "reason": "no-instance"}, 1},
	} {
		if got := metricValue(t, s.reg, m.name, m.labels); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
}

func TestReviewDeadlineInsideWebhookTimeout(t *testing.T) {
	got := make(chan time.Duration, 1)
	record := reviewFunc(func(ctx context.Context, _, id string, _ *admissionv1.AdmissionRequest) (*tetherv1.AdmissionResponse, *binding.Binding, error) {
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(time.Hour)
		}
		got <- time.Until(deadline)
		return &tetherv1.AdmissionResponse{Allowed: true}, admissionBinding(id, binding.Validate, binding.FailFail), nil
	})
	b5 := admissionBinding("b", binding.Validate, binding.FailFail)
	b5.Admission.Timeout = 5 * time.Second
	for _, c := range []struct {
		name     string
		reviewer Reviewer
		query    string
		want     time.Duration
	}{
		{"API server's 10s", record, "?timeout=10s", 9 * time.Second},
		{"API server's 2s", record, "?timeout=2s", 1600 * time.Millisecond},
		{"API server's 30s", record, "?timeout=30s", 29 * time.Second},
		{"API server's wins over the binding's", lookupReviewer{reviewFunc: record, b: b5}, "?timeout=2s", 1600 * time.Millisecond},
		{"the binding's without one", lookupReviewer{reviewFunc: record, b: b5}, "", 4 * time.Second},
		{"default without either", record, "", 9 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := startServer(t, c.reviewer, 0, 0)
			if status, _, text := s.post(t, http.MethodPost, "/admit/h/b"+c.query, reviewBody(t, testObject)); status != http.StatusOK {
				t.Fatalf("got %d %s", status, text)
			}
			// The request's own time in flight is the slack.
			if d := <-got; d > c.want || d < c.want-time.Second/2 {
				t.Errorf("Review's deadline was %v away, want %v", d, c.want)
			}
		})
	}
}

func TestSlowHandlerDoesNotBlockOthers(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	reviewer := reviewFunc(func(ctx context.Context, handler, id string, _ *admissionv1.AdmissionRequest) (*tetherv1.AdmissionResponse, *binding.Binding, error) {
		if handler == "slow" {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return &tetherv1.AdmissionResponse{Allowed: true}, admissionBinding(id, binding.Validate, binding.FailFail), nil
	})
	s := startServer(t, reviewer, 0, 0)
	body := reviewBody(t, testObject)
	slowDone := make(chan int, 1)
	s.postAsync("slow", body, slowDone)
	<-entered
	for i := range 5 {
		if status, review, text := s.post(t, http.MethodPost, fmt.Sprintf("/admit/fast-%d/b", i), body); status != http.StatusOK || !review.Response.Allowed {
			t.Fatalf("a review of another handler while one is slow: %d %s", status, text)
		}
	}
	select {
	case status := <-slowDone:
		t.Fatalf("the slow review ended (%d) before it was released", status)
	default:
	}
	close(release)
	if status := <-slowDone; status != http.StatusOK {
		t.Errorf("the slow review: got %d", status)
	}
}

// TestReviewsAreBoundedPerHandler: past MaxReviewsPerHandler reviews under
// way, a handler's next review is answered 429 at once, before its body is
// read, and other handlers are not held back.
func TestReviewsAreBoundedPerHandler(t *testing.T) {
	entered, release := make(chan struct{}, 8), make(chan struct{})
	reviewer := reviewFunc(func(ctx context.Context, handler, id string, _ *admissionv1.AdmissionRequest) (*tetherv1.AdmissionResponse, *binding.Binding, error) {
		if handler == "busy" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return &tetherv1.AdmissionResponse{Allowed: true}, admissionBinding(id, binding.Validate, binding.FailFail), nil
	})
	s := startServer(t, reviewer, 0, 2)
	body := reviewBody(t, testObject)
	done := make(chan int, 2)
	for range 2 {
		s.postAsync("busy", body, done)
	}
	<-entered
	<-entered
	// A body that never ends: only a server that does not read it answers.
	pr, pw := io.Pipe()
	defer pw.Close()
	resp, err := s.client.Post(s.base+testPaths.Path("busy", "b"), "application/json", pr)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(text), "2 reviews under way") {
		t.Errorf("a third review of a busy handler: %d %q, want 429", resp.StatusCode, text)
	}
	if status, _, text := s.post(t, http.MethodPost, "/admit/other/b", body); status != http.StatusOK {
		t.Errorf("another handler's review: %d %s", status, text)
	}
	close(release)
	for range 2 {
		if status := <-done; status != http.StatusOK {
			t.Errorf("a review under way: %d", status)
		}
	}
}

// TestUnsignedRequestsNeverReachTheHandler: whoever does not know the
// webhook's path, which only the API server and readers of webhook
// configurations do, gets 404 and nothing is forwarded, whatever the body.
func TestUnsignedRequestsNeverReachTheHandler(t *testing.T) {
	var calls atomic.Int32
	reviewer := reviewFunc(func(_ context.Context, _, id string, _ *admissionv1.AdmissionRequest) (*tetherv1.AdmissionResponse, *binding.Binding, error) {
		calls.Add(1)
		return &tetherv1.AdmissionResponse{Allowed: true}, admissionBinding(id, binding.Validate, binding.FailFail), nil
	})
	s := startServer(t, reviewer, 0, 0)
	body := reviewBody(t, testObject)
	for _, path := range []string{"/admit/h/b", "/admit/h/b/forged", "/admit/h/b/" + strings.Repeat("A", 43), "/admit//b/x"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("POST %s: %d, want 404", path, resp.StatusCode)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d unsigned requests reached the handler", n)
	}
	if status, _, _ := s.post(t, http.MethodPost, "/admit/h/b", body); status != http.StatusOK || calls.Load() != 1 {
		t.Errorf("the signed path: %d, %d reviews; want 200 and 1", status, calls.Load())
	}
}

func TestServerOptionsAreChecked(t *testing.T) {
	certs := testCerts(t)
	r := reviewFunc(nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"no reviewer", Options{Certs: certs, Paths: testPaths, Listener: lis}, "a Reviewer is required"},
		{"no certs", Options{Reviewer: r, Paths: testPaths, Listener: lis}, "certificates are required"},
		{"no path key", Options{Reviewer: r, Certs: certs, Listener: lis}, "a path key is required"},
		{"no address", Options{Reviewer: r, Certs: certs, Paths: testPaths}, "a listen address is required"},
	} {
		if _, err := New(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
	s, err := New(Options{Reviewer: r, Certs: certs, Paths: testPaths, Listener: lis})
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr() != nil {
		t.Errorf("Addr before Listen: %v", s.Addr())
	}
	if err := s.Listen(); err != nil || s.Addr().String() != lis.Addr().String() {
		t.Errorf("Listen: %v, Addr %v, want %v", err, s.Addr(), lis.Addr())
	}
}

func TestSignedPathsRoundTrip(t *testing.T) {
	p := testPaths.Path("secret-owner", "validate-secrets")
	if !strings.HasPrefix(p, "/admit/secret-owner/validate-secrets/") || len(p) < len("/admit/secret-owner/validate-secrets/")+40 {
		t.Fatalf("Path: %q, want the handler, the binding and a signature", p)
	}
	if h, b, ok := testPaths.parse(p); !ok || h != "secret-owner" || b != "validate-secrets" {
		t.Errorf("parse(%q) = %q %q %v", p, h, b, ok)
	}
	other, err := NewPathKey(bytes.Repeat([]byte{8}, PathKeySize))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"/admit/secret-owner/validate-secrets",
		other.Path("secret-owner", "validate-secrets"),
		strings.Replace(p, "validate-secrets", "other", 1),
		p + "/",
	} {
		if _, _, ok := testPaths.parse(bad); ok {
			t.Errorf("parse(%q) accepted a path it did not sign", bad)
		}
	}
	if _, err := NewPathKey([]byte("short")); err == nil {
		t.Error("NewPathKey took a 5-byte key")
	}
}

// TestOldTLSIsRefused: the endpoint speaks TLS 1.2 and later only.
func TestOldTLSIsRefused(t *testing.T) {
	s := startServer(t, reviewFunc(nil), 0, 0)
	addr := strings.TrimPrefix(s.base, "https://")
	roots := s.client.Transport.(*http.Transport).TLSClientConfig.RootCAs
	if conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil {
		conn.Close()
		t.Error("TLS 1.1 was accepted")
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS 1.2 was refused: %v", err)
	}
	conn.Close()
}
