package dispatch

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/timer"
)

// handler is what the parts of one handler's controller share: who it is, its
// bindings, the objects it knows, its instances, the writer and the
// presence keeper. Each part (controller, reconciler, deliverer, timers,
// daemons, reviews, sweeper) embeds it and adds only its own state.
type handler struct {
	name     string
	bindings []*binding.Binding
	// byResource has the bindings served by watching, by resource;
	// admission has the validate and mutate bindings, by id.
	byResource map[schema.GroupVersionResource][]*binding.Binding
	admission  map[string]*binding.Binding
	// bindingMetrics are each binding's delivery metrics, by id.
	bindingMetrics map[string]*metrics.Binding
	opts           *Options
	log            hclog.Logger
	clock          clock.WithTicker

	pool     *pool
	presence *presenceKeeper
	// writes makes the writes to objects.
	writes *objectWriter
	// sched fires ticks and daemon restarts; set when the controller starts.
	sched *timer.Scheduler

	// tracer makes the spans of the handler's passes; nil when the broker
	// does not trace (trace.go).
	tracer trace.Tracer

	mu      sync.Mutex
	objects map[types.UID]*object
	// seen has the watch event that queued each object's next pass, only
	// while the handler traces.
	seen map[types.UID]watchSeen
}

func newHandler(opts *Options, log hclog.Logger, name string, bindings []*binding.Binding) *handler {
	h := &handler{
		name: name, bindings: bindings, opts: opts, log: log, clock: opts.Clock,
		byResource:     map[schema.GroupVersionResource][]*binding.Binding{},
		admission:      map[string]*binding.Binding{},
		objects:        map[types.UID]*object{},
		pool:           newPool(),
		bindingMetrics: make(map[string]*metrics.Binding, len(bindings)),
	}
	if opts.Tracer != nil {
		h.tracer, h.seen = opts.Tracer, map[types.UID]watchSeen{}
	}
	h.writes = &objectWriter{handlerName: name, opts: opts, mu: &h.mu}
	h.writes.inFlight.max = opts.Workers / 2
	for _, b := range bindings {
		if opts.Metrics != nil {
			h.bindingMetrics[b.ID] = opts.Metrics.Binding(name, b.ID)
		}
		if b.Kind.IsAdmission() {
			h.admission[b.ID] = b
			continue
		}
		h.byResource[b.Resource.GroupVersionResource] = append(h.byResource[b.Resource.GroupVersionResource], b)
	}
	return h
}

// resources lists the resources of the bindings.
func (h *handler) resources() []schema.GroupVersionResource {
	out := make([]schema.GroupVersionResource, 0, len(h.byResource))
	for gvr := range h.byResource {
		out = append(out, gvr)
	}
	return out
}

// bindingsOf are the bindings that watch o's resource.
func (h *handler) bindingsOf(o *object) []*binding.Binding {
	return h.byResource[o.res.GroupVersionResource]
}

func (h *handler) bindingByID(o *object, id string) *binding.Binding {
	for _, b := range h.bindingsOf(o) {
		if b.ID == id {
			return b
		}
	}
	return nil
}

// matches evaluates b's filters; a CEL error counts as no match and is
// logged, since it comes from the object, not from the broker.
func (h *handler) matches(b *binding.Binding, obj *unstructured.Unstructured, old map[string]any) bool {
	ok, err := b.Matches(obj, old)
	if err != nil {
		h.log.Warn("when expression failed; binding skipped", "binding", b.ID,
			"namespace", obj.GetNamespace(), "name", obj.GetName(), "error", err)
	}
	return ok && err == nil
}

// matchesCur is matches on the pass's state of o, decoding it only when b
// has a filter beyond namespaces.
func (h *handler) matchesCur(b *binding.Binding, o *object) bool {
	if !b.ReadsObject() {
		return b.InNamespace(o.cur.Namespace)
	}
	return h.matches(b, o.decoded(), nil)
}

// policy is the strongest finalizer policy among bindings that match obj
// and hold it.
func (h *handler) policy(bindings []*binding.Binding, obj *unstructured.Unstructured) contract.Policy {
	p := contract.NoHold
	for _, b := range bindings {
		if !b.Holds() || !h.matches(b, obj, nil) {
			continue
		}
		if b.Policy == binding.PolicyStrict {
			return contract.Strict
		}
		p = contract.Hold
	}
	return p
}

func (h *handler) invalidPatch(obj *unstructured.Unstructured, b *binding.Binding, err error) {
	h.opts.Recorder.Event(obj, true, "InvalidPatch",
		fmt.Sprintf("%s binding %q of handler %q: %v; nothing of its answer was written", b.Kind, b.ID, h.name, err))
}

// takeDue removes and returns a fired key's due time.
func (h *handler) takeDue(o *object, name string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return o.due.take(name)
}

// markDue records that a key is due (again): a tick not delivered yet.
func (h *handler) markDue(o *object, name string, due time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o.due.set(name, due)
}
