package tracing

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/gobin"
	"github.com/tether-dev/tether/test/testenv"
	"github.com/tether-dev/tether/test/typescript"
)

// waitTimeout bounds every wait on the cluster, the processes and Jaeger.
const waitTimeout = 60 * time.Second

const brokerService = "tether-broker"

// handler is the handler process a test runs: its name, which the broker's
// spans carry, and the service of its own spans (empty: it sends none).
type handler struct{ name, service string }

var (
	goHandler = handler{name: "tracehandler", service: "tracehandler"}
	tsHandler = handler{name: "tshandler", service: "tshandler"}
)

var widgetGVR = schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}

// TestAChangeIsOneTraceAcrossBrokerAndHandler: with OTEL_* pointing the
// broker and a Go handler at a real Jaeger, the create and the delete of a
// widget each come back from Jaeger's query API as one trace holding the
// spans of both processes: the broker's pass with the watch event, the
// wait in the queue, the delivery (handler and binding as attributes) and
// its ack, the write that adds or releases the hold, and the handler's
// function as a child of the broker's delivery span.
func TestAChangeIsOneTraceAcrossBrokerAndHandler(t *testing.T) {
	oneTracePerChange(t, goHandler, func(env []string, addr, ns string) *process {
		return start(t, "handler", gobin.Build(t, "github.com/tether-dev/tether/test/tracing/tracehandler"), env,
			"--broker", addr, "--name", goHandler.name, "--namespace", ns)
	})
}

// TestATypeScriptHandlersFunctionIsInTheTrace: the same with the
// TypeScript SDK's handler (tshandler), a Node process that registers
// OpenTelemetry's Node SDK with an OTLP exporter: its function's span is a
// child of the broker's delivery span, in the same trace.
func TestATypeScriptHandlersFunctionIsInTheTrace(t *testing.T) {
	const dir = "tshandler" // its package, beside this file
	typescript.Install(t, dir)
	oneTracePerChange(t, tsHandler, func(env []string, addr, ns string) *process {
		return start(t, "handler", "node", env, filepath.Join(dir, "handler.js"),
			"--broker", addr, "--name", tsHandler.name, "--namespace", ns)
	})
}

// oneTracePerChange starts Jaeger, a broker and the handler h (run by
// handler with env, the broker's address and the namespace), creates and
// deletes a widget and checks that each change is one trace in Jaeger.
func oneTracePerChange(t *testing.T, h handler, run func(env []string, addr, ns string) *process) {
	e := startTraced(t)
	p := run(e.otel(h.service), e.addr, e.ns)

	create(t, e.dyn, e.ns, "w1")
	waitLine(t, p, "CREATE "+e.ns+"/w1")
	waitObject(t, e.dyn, e.ns, "w1", "held", func(o *unstructured.Unstructured) bool { return o != nil && hold.Has(o, h.name) })
	created := waitTrace(t, e.jaeger, h, "create", "w1", "ADDED", "tether.hold.add")
	logTree(t, "the trace of the create", created)

	if err := e.dyn.Resource(widgetGVR).Namespace(e.ns).Delete(context.Background(), "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting w1: %v", err)
	}
	waitLine(t, p, "DELETE "+e.ns+"/w1")
	waitObject(t, e.dyn, e.ns, "w1", "gone", func(o *unstructured.Unstructured) bool { return o == nil })
	deleted := waitTrace(t, e.jaeger, h, "delete", "w1", "MODIFIED", "tether.hold.release")
	logTree(t, "the trace of the delete", deleted)
}

// tracedEnv is what every test here runs against: a control plane with
// the widgets' CRD, a namespace, a Jaeger, and a broker sending its spans
// there, listening for handlers on addr.
type tracedEnv struct {
	cp     *controlplane.ControlPlane
	dyn    dynamic.Interface
	ns     string
	jaeger *controlplane.Jaeger
	addr   string
	broker *process
}

// startTraced starts Jaeger and a broker exporting to it, with brokerArgs
// added to its command line.
func startTraced(t *testing.T, brokerArgs ...string) *tracedEnv {
	t.Helper()
	e := &tracedEnv{cp: controlplane.Get(t)}
	e.dyn = e.cp.EnsureWidgetCRD(t)
	e.ns = e.cp.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // a first build of jaeger included
	defer cancel()
	j, err := controlplane.StartJaeger(ctx, controlplane.JaegerOptions{Dir: t.TempDir(), Output: testenv.LogWriter(t, "jaeger: "),
		Progress: testenv.LogWriter(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Stop() })
	e.jaeger = j
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	e.addr = "127.0.0.1:" + strconv.Itoa(ports[0])
	args := append([]string{"--kubeconfig", e.cp.KubeconfigPath(), "--listen", e.addr, "--insecure", "--namespace", e.ns,
		"--metrics-listen", ""}, brokerArgs...)
	e.broker = start(t, "broker", gobin.Build(t, "github.com/tether-dev/tether/cmd/broker"), e.otel(brokerService), args...)
	return e
}

// otel is the environment that sends a process's spans, as service, to
// the test's Jaeger.
func (e *tracedEnv) otel(service string) []string {
	// A short batching delay: the spans reach Jaeger within 100 ms.
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + e.jaeger.OTLP, "OTEL_SERVICE_NAME=" + service, "OTEL_BSP_SCHEDULE_DELAY=100"}
}

// waitTrace waits until Jaeger has the whole trace of the delivery of
// binding of h to the widget name, queued by a watch event of eventType,
// whose write sets holdTag, and returns its spans.
func waitTrace(t *testing.T, j *controlplane.Jaeger, h handler, binding, name, eventType, holdTag string) []*span {
	t.Helper()
	var found []*span
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		all, err := j.Traces(ctx, brokerService)
		if err != nil {
			last = err
			return false, nil
		}
		last = fmt.Errorf("no trace of Jaeger's %d has a delivery of binding %q to %s", len(all), binding, name)
		for _, spans := range all {
			if !delivers(spans, binding, name) {
				continue
			}
			found = spans
			last = whole(spans, h, binding, eventType, holdTag)
			return last == nil, nil
		}
		return false, nil
	})
	if err != nil {
		if found != nil {
			logTree(t, "the trace found", found)
		}
		t.Fatalf("waiting for the trace of the %s of %s in Jaeger: %v", binding, name, last)
	}
	return found
}

// delivers tells whether the trace has the broker's delivery of binding to
// the widget name.
func delivers(spans []*span, binding, name string) bool {
	for _, s := range spans {
		if s.Name == "tether.pass" && s.Tags["k8s.object.name"] == name {
			for _, d := range spans {
				if d.Name == "tether.deliver" && d.Tags["tether.binding.id"] == binding {
					return true
				}
			}
		}
	}
	return false
}

// whole says what the trace of a delivery of binding of h lacks, or nil:
// the spans of both services, each where it belongs.
func whole(spans []*span, h handler, binding, eventType, holdTag string) error {
	one := func(name, service string, parent *span, tags map[string]string) (*span, error) {
		for _, s := range spans {
			if s.Name != name || s.Service != service || s.Parent != parent || !hasTags(s, tags) {
				continue
			}
			return s, nil
		}
		under := "no parent"
		if parent != nil {
			under = "parent " + parent.Name
		}
		return nil, fmt.Errorf("no span %s of %s with %s and tags %v", name, service, under, tags)
	}
	root, err := one("tether.pass", brokerService, nil, map[string]string{"tether.handler": h.name})
	if err != nil {
		return err
	}
	del, err := one("tether.deliver", brokerService, root, map[string]string{"tether.handler": h.name, "tether.binding.id": binding})
	var errs []error
	for _, e := range []error{err, second(one("tether.watch_event", brokerService, root, map[string]string{"k8s.watch.event_type": eventType})),
		second(one("tether.queue", brokerService, root, nil)),
		second(one("tether.write", brokerService, root, map[string]string{holdTag: "true"}))} {
		errs = append(errs, e)
	}
	if del != nil {
		errs = append(errs, second(one("tether.ack", brokerService, del, map[string]string{"tether.ack.outcome": "OUTCOME_OK"})))
		if h.service != "" {
			errs = append(errs, second(one("tether.handle", h.service, del, map[string]string{"tether.handler": h.name, "tether.binding.id": binding})))
		}
	}
	if h.service == "" {
		errs = append(errs, onlyBrokers(spans))
	}
	return errors.Join(errs...)
}

// onlyBrokers says which span of the trace is not the broker's, or nil.
func onlyBrokers(spans []*span) error {
	for _, s := range spans {
		if s.Service != brokerService {
			return fmt.Errorf("span %s of %s in the trace of a handler that traces nothing", s.Name, s.Service)
		}
	}
	return nil
}

func second(_ *span, err error) error { return err }

func hasTags(s *span, tags map[string]string) bool {
	for k, v := range tags {
		if s.Tags[k] != v {
			return false
		}
	}
	return true
}

func create(t *testing.T, dyn dynamic.Interface, ns, name string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"size": int64(1)},
	}}
	if _, err := dyn.Resource(widgetGVR).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
}

// waitObject waits until the widget ns/name satisfies cond (nil: gone).
func waitObject(t *testing.T, dyn dynamic.Interface, ns, name, what string, cond func(*unstructured.Unstructured) bool) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, fmt.Sprintf("widget %s/%s %s", ns, name, what), func() bool {
		obj, err := dyn.Resource(widgetGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return cond(nil)
		case err != nil:
			return false
		}
		return cond(obj)
	})
}

// waitLine waits until p printed line.
func waitLine(t *testing.T, p *process, line string) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, "the handler printing "+line, func() bool {
		return p.out.Any(func(l string) bool { return strings.TrimSpace(l) == line })
	})
}
