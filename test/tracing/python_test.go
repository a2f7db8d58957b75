package tracing

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/test/pyinterp"
	"github.com/tether-dev/tether/test/testenv"
)

// pyHandler sends no span: the opentelemetry package is not installed on
// the machines the tests run on, and the Python SDK does not depend on it.
var pyHandler = handler{name: "pyhandler"}

// TestAPythonHandlersLinesNameTheTrace: a Python handler without
// opentelemetry continues no span, but the line its function logs for a
// traced delivery names the trace (trace_id), and that trace is whole in
// Jaeger with the broker's spans alone: create and delete alike.
func TestAPythonHandlersLinesNameTheTrace(t *testing.T) {
	if why := pyinterp.PythonMissing(); why != "" {
		if os.Getenv("TETHER_CI") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	sdk, err := filepath.Abs(filepath.Join("..", "..", "sdk", "python"))
	if err != nil {
		t.Fatal(err)
	}
	e := startTraced(t)
	p := start(t, "handler", pyinterp.Python, append(e.otel("pyhandler"), "PYTHONPATH="+sdk, "PYTHONDONTWRITEBYTECODE=1"),
		"-u", filepath.Join("pyhandler", "handler.py"), "--broker", e.addr, "--name", pyHandler.name, "--namespace", e.ns)

	create(t, e.dyn, e.ns, "w1")
	created := traceIDOf(t, p, "CREATE "+e.ns+"/w1")
	waitObject(t, e.dyn, e.ns, "w1", "held", func(o *unstructured.Unstructured) bool { return o != nil && hold.Has(o, pyHandler.name) })
	sameTrace(t, created, waitTrace(t, e.jaeger, pyHandler, "create", "w1", "ADDED", "tether.hold.add"))

	if err := e.dyn.Resource(widgetGVR).Namespace(e.ns).Delete(context.Background(), "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting w1: %v", err)
	}
	deleted := traceIDOf(t, p, "DELETE "+e.ns+"/w1")
	waitObject(t, e.dyn, e.ns, "w1", "gone", func(o *unstructured.Unstructured) bool { return o == nil })
	sameTrace(t, deleted, waitTrace(t, e.jaeger, pyHandler, "delete", "w1", "MODIFIED", "tether.hold.release"))
}

// traceIDOf waits for the handler's JSON line whose message is msg and
// returns the trace_id it carries ("" when it carries none).
func traceIDOf(t *testing.T, p *process, msg string) string {
	t.Helper()
	var id string
	testenv.Eventually(t, waitTimeout, "the handler logging "+msg, func() bool {
		return p.out.Any(func(l string) bool {
			var line struct {
				Message string `json:"message"`
				TraceID string `json:"trace_id"`
			}
			if json.Unmarshal([]byte(strings.TrimSpace(l)), &line) != nil || line.Message != msg {
				return false
			}
			id = line.TraceID
			return true
		})
	})
	return id
}

// sameTrace fails t unless the handler's line named the trace found
// (Jaeger's query API writes trace ids without their leading zeros).
func sameTrace(t *testing.T, logged string, spans []*span) {
	t.Helper()
	if len(spans) == 0 || logged == "" || strings.TrimLeft(logged, "0") != strings.TrimLeft(spans[0].TraceID, "0") {
		t.Errorf("the handler's line names trace %q, the trace in Jaeger is %s", logged, traceIDs(spans))
	}
}

func traceIDs(spans []*span) string {
	if len(spans) == 0 {
		return "none"
	}
	return fmt.Sprintf("%q", spans[0].TraceID)
}
