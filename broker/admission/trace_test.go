package admission

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/tether-dev/tether/broker/binding"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// syncBuffer is a bytes.Buffer the server's goroutines may log to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// checkReviewLogs checks that the lines about the review name its trace:
// the answer's, and the failure policy's when the handler failed.
func checkReviewLogs(t *testing.T, logs, traceID string, failed bool) {
	t.Helper()
	want := []string{"admission review answered"}
	if failed {
		want = append(want, "applying its failure policy")
	}
	for _, w := range want {
		found := false
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, w) {
				found = true
				if !strings.Contains(l, "trace_id="+traceID) {
					t.Errorf("the line %q does not name the review's trace %s", l, traceID)
				}
			}
		}
		if !found {
			t.Errorf("no line %q in %s", w, logs)
		}
	}
}

// A traced review is one span of the API server's request, continuing the
// traceparent it sent, if any; the Reviewer runs under it (the dispatcher
// hangs its delivery there), and the answer is its child, with the result
// and, when the handler failed, the failure policy's reason.
func TestAReviewIsTraced(t *testing.T) {
	const remoteTrace, remoteSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, tc := range []struct {
		name        string
		traceparent string
		fail        bool
		result      string
	}{
		{name: "allowed", result: "allowed"},
		{name: "traceparent continued", traceparent: "00-" + remoteTrace + "-" + remoteSpan + "-01", result: "allowed"},
		{name: "handler failed", fail: true, result: "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			var under trace.SpanContext
			b := admissionBinding("b", binding.Validate, binding.FailIgnore)
			r := lookupReviewer{b: b, reviewFunc: func(ctx context.Context, _, _ string, _ *admissionv1.AdmissionRequest) (*tetherv1.AdmissionResponse, *binding.Binding, error) {
				under = trace.SpanContextFromContext(ctx)
				if tc.fail {
					return nil, b, errors.New("the handler crashed")
				}
				return &tetherv1.AdmissionResponse{Allowed: true}, b, nil
			}}
			var logs syncBuffer
			s := startServerWith(t, r, func(o *Options) {
				o.Tracer = tp.Tracer("test")
				o.Log = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
			})
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.base+testPaths.Path("h", "b"), bytes.NewReader(reviewBody(t, testObject)))
			if err != nil {
				t.Fatal(err)
			}
			if tc.traceparent != "" {
				req.Header.Set("traceparent", tc.traceparent)
			}
			resp, err := s.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			checkReviewSpans(t, rec.Ended(), under, tc.traceparent != "", tc.result, tc.fail)
			checkReviewLogs(t, logs.String(), under.TraceID().String(), tc.fail)
		})
	}
}

// checkReviewSpans checks the spans of one review: the request's, under
// which the Reviewer ran (under), and the answer's.
func checkReviewSpans(t *testing.T, spans []sdktrace.ReadOnlySpan, under trace.SpanContext, remote bool, result string, failed bool) {
	t.Helper()
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = s
	}
	review, answer := byName[spanReview], byName[spanAnswer]
	if review == nil || answer == nil {
		t.Fatalf("spans %v, want %s and %s", byName, spanReview, spanAnswer)
	}
	if under.SpanID() != review.SpanContext().SpanID() {
		t.Errorf("the Reviewer ran under span %s, not the review's %s", under.SpanID(), review.SpanContext().SpanID())
	}
	if answer.Parent().SpanID() != review.SpanContext().SpanID() {
		t.Errorf("the answer's parent is %s, not the review's %s", answer.Parent().SpanID(), review.SpanContext().SpanID())
	}
	if got := review.Parent().IsValid(); got != remote {
		t.Errorf("the review has a parent: %v, want %v (the API server's traceparent)", got, remote)
	}
	if remote && review.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("the review is in trace %s, not the traceparent's", review.SpanContext().TraceID())
	}
	attrs := map[string]string{}
	for _, kv := range append(review.Attributes(), answer.Attributes()...) {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range map[string]string{"tether.handler": "h", "tether.binding.id": "b", "tether.admission.operation": "CREATE",
		"k8s.namespace.name": "ns", "k8s.object.name": "cm", "tether.admission.result": result} {
		if attrs[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, attrs[k], v)
		}
	}
	if failed && attrs["tether.admission.failure_reason"] != "error" {
		t.Errorf("failure reason %q, want error", attrs["tether.admission.failure_reason"])
	}
}
