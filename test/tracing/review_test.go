package tracing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/test/gobin"
)

// TestAReviewIsOneTraceAcrossBrokerAndHandler: the Go handler's validate
// binding refuses a widget named deny-*; the review comes back from
// Jaeger as one trace: the broker's span of the API server's request
// (tether.review) as the root, its delivery to the handler with the ack
// and the handler's function (tether.handle, of the handler's service)
// under it, and the answer (tether.answer, result denied).
func TestAReviewIsOneTraceAcrossBrokerAndHandler(t *testing.T) {
	e := startTraced(t, "--admission-listen", "127.0.0.1:0")
	// The webhooks leave out the broker's own namespace: the widgets are
	// in another.
	ns := e.cp.Namespace(t)
	p := start(t, "handler", gobin.Build(t, "github.com/tether-dev/tether/test/tracing/tracehandler"), e.otel(goHandler.service),
		"--broker", e.addr, "--name", goHandler.name, "--namespace", ns, "--validate")
	name := refusedCreate(t, e, ns)
	waitLine(t, p, "REVIEW "+ns+"/"+name)

	var found []*span
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		all, err := e.jaeger.Traces(ctx, brokerService)
		if err != nil {
			last = err
			return false, nil
		}
		last = fmt.Errorf("no trace of Jaeger's %d has a review of %s", len(all), name)
		for _, spans := range all {
			for _, s := range spans {
				if s.Name == "tether.review" && s.Tags["k8s.object.name"] == name {
					found, last = spans, wholeReview(spans)
					return last == nil, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		if found != nil {
			logTree(t, "the trace found", found)
		}
		t.Fatalf("waiting for the trace of the review of %s in Jaeger: %v", name, last)
	}
	logTree(t, "the trace of the review", found)
}

// refusedCreate creates widgets named deny-N in ns until one is refused: the
// first ones may pass before the API server calls the webhook the broker
// wrote. It returns the refused one's name.
func refusedCreate(t *testing.T, e *tracedEnv, ns string) string {
	t.Helper()
	// Another user than the broker's, which uses the same admin
	// credentials as the test: the webhooks let the broker's own writes
	// through unreviewed.
	cfg := e.cp.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tester", Groups: []string{"system:masters", "system:authenticated"}}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	i := 0
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		name = "deny-" + strconv.Itoa(i)
		i++
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "test.tether.dev/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"size": int64(1)},
		}}
		_, err := dyn.Resource(widgetGVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		return apierrors.IsForbidden(err), nil
	})
	if err != nil {
		t.Fatalf("no create of a widget deny-N was refused: %v", err)
	}
	return name
}

// wholeReview says what the trace of a review lacks, or nil.
func wholeReview(spans []*span) error {
	find := func(name, service string, parent *span, tags map[string]string) *span {
		for _, s := range spans {
			if s.Name == name && s.Service == service && s.Parent == parent && hasTags(s, tags) {
				return s
			}
		}
		return nil
	}
	root := find("tether.review", brokerService, nil, map[string]string{"tether.handler": goHandler.name, "tether.binding.id": "validate",
		"tether.admission.operation": "CREATE"})
	if root == nil {
		return errors.New("no root span tether.review of the handler's binding validate")
	}
	var errs []error
	if find("tether.answer", brokerService, root, map[string]string{"tether.admission.result": "denied"}) == nil {
		errs = append(errs, errors.New("no tether.answer with result denied under the review"))
	}
	del := find("tether.deliver", brokerService, root, map[string]string{"tether.binding.id": "validate", "tether.delivery.kind": "admission"})
	if del == nil {
		return errors.Join(append(errs, errors.New("no tether.deliver of kind admission under the review"))...)
	}
	if find("tether.ack", brokerService, del, map[string]string{"tether.ack.outcome": "OUTCOME_OK"}) == nil {
		errs = append(errs, errors.New("no tether.ack OUTCOME_OK under the delivery"))
	}
	if find("tether.handle", goHandler.service, del, map[string]string{"tether.binding.id": "validate"}) == nil {
		errs = append(errs, fmt.Errorf("no tether.handle of %s under the delivery", goHandler.service))
	}
	return errors.Join(errs...)
}
