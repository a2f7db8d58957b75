package metrics

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Delivery outcomes: the ack's outcome, or what ended the attempt without one.
const (
	OutcomeOK      = "ok"
	OutcomeRetry   = "retry"
	OutcomeFail    = "fail"
	OutcomeInvalid = "invalid" // an ack without an outcome
	OutcomeTimeout = "timeout" // no ack within the binding's timeout
	OutcomeGone    = "gone"    // the instance left (or said goodbye) first
)

// Why a hold was released; the rules of the contract (docs/design.md) in brackets.
const (
	ReleaseDone             = "done"               // the deletion work was acknowledged (3a)
	ReleaseNoLongerMatching = "no-longer-matching" // the object stopped matching, or the binding went (3e)
	ReleaseAbsent           = "absent"             // deleting, and the handler is past its grace (3c)
	ReleaseLongAbsent       = "long-absent"        // the handler is past absent_release_after (3d)
	ReleaseUninstall        = "uninstall"          // the broker is being uninstalled (3f)
	ReleaseDaemonTimeout    = "daemon-timeout"     // a daemon did not acknowledge stop in time (3b)
)

// ReleaseReasons lists every release reason.
var ReleaseReasons = []string{
	ReleaseDone, ReleaseNoLongerMatching, ReleaseAbsent,
	ReleaseLongAbsent, ReleaseUninstall, ReleaseDaemonTimeout, ReleaseRequested,
}

// Write verbs and codes for APIWrite.
const (
	VerbPatch       = "patch"
	VerbStatusPatch = "status-patch"

	CodeOK       = "ok"
	CodeConflict = "conflict"  // 409, or 422 from a failed test guard: retried on the next state
	CodeNotFound = "not-found" // the object is gone; nothing to write
	CodeError    = "error"     // no HTTP status: transport, timeout, cancelled
)

// AckLatencyBuckets span 1 ms to 60 s.
var AckLatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Metrics are the broker's metrics. The zero value is not usable; a nil
// *Metrics is, and records nothing.
type Metrics struct {
	gatherer prometheus.Gatherer
	reg      prometheus.Registerer

	deliveries    *prometheus.CounterVec
	ackLatency    *prometheus.HistogramVec
	queueDepth    *prometheus.GaugeVec
	holdsAdded    *prometheus.CounterVec
	holdsReleased *prometheus.CounterVec
	sessions      *prometheus.GaugeVec
	sessionsTotal *prometheus.CounterVec
	timers        *prometheus.GaugeVec
	apiWrites     *prometheus.CounterVec
	lists         *prometheus.CounterVec
	present       *prometheus.GaugeVec
	admission     admissionMetrics
	signin        signinMetrics
	orphans       orphanMetrics
	bindings      bindingMetrics

	// known are the handlers whose series were set to zero.
	known sync.Map
}

// New builds the metrics and registers them on reg; a nil reg means a
// private registry (see Gatherer). Registering on a Registerer that already
// has them reuses the registered collectors, so two Metrics on one registry
// share their series.
func New(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{reg: reg}
	if g, ok := reg.(prometheus.Gatherer); ok {
		m.gatherer = g
	}
	handler := []string{"handler"}
	m.deliveries = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_deliveries_total",
		Help: "Delivery attempts by handler, delivery kind and outcome (ok, retry, fail, invalid, timeout, gone).",
	}, []string{"handler", "kind", "outcome"}))
	m.ackLatency = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tether_ack_latency_seconds",
		Help:    "Time from the start of a delivery attempt (including waiting for a window slot) to its ack.",
		Buckets: AckLatencyBuckets,
	}, []string{"handler", "kind"}))
	m.queueDepth = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tether_queue_depth",
		Help: "Objects waiting in the handler's work queue, sampled as the queue is used.",
	}, handler))
	m.holdsAdded = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_holds_added_total",
		Help: "Holds (finalizers tether.dev/<handler>) added to objects.",
	}, handler))
	m.holdsReleased = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_holds_released_total",
		Help: "Holds released from objects, by reason (done, no-longer-matching, absent, long-absent, uninstall, daemon-timeout, requested).",
	}, []string{"handler", "reason"}))
	m.sessions = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tether_sessions",
		Help: "Handler instances connected now.",
	}, handler))
	m.sessionsTotal = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_sessions_total",
		Help: "Handler instance sessions opened.",
	}, handler))
	m.timers = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tether_timers_scheduled",
		Help: "Timer ticks and daemon restarts scheduled for the handler, sampled.",
	}, handler))
	m.apiWrites = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_api_writes_total",
		Help: "Writes to the API server by verb (patch, status-patch), resource and code (ok, conflict, not-found, 4xx, 5xx, error).",
	}, []string{"verb", "resource", "code"}))
	m.lists = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_informer_lists_total",
		Help: "Lists of a resource from zero by the broker's informers: at their start (unless a follower kept them warm) and when a watch is too old to resume (410 Gone).",
	}, []string{"resource"}))
	m.present = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tether_handler_present",
		Help: "1 while at least one instance of the handler is connected, else 0.",
	}, handler))
	m.admission = newAdmissionMetrics(reg)
	m.signin = newSigninMetrics(reg)
	m.orphans = newOrphanMetrics(reg)
	m.bindings = newBindingMetrics(reg)
	return m
}

// register registers c, or returns the collector already registered in its
// place.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic("metrics: " + err.Error())
	}
	return c
}

// Gatherer is the registry the metrics were registered on, when it can be
// gathered (a *prometheus.Registry, or the private one); else nil.
func (m *Metrics) Gatherer() prometheus.Gatherer {
	if m == nil {
		return nil
	}
	return m.gatherer
}

// Handler serves the metrics of Gatherer in the Prometheus exposition
// format; 404 when there is nothing to gather.
func (m *Metrics) Handler() http.Handler {
	return handlerFor(m.Gatherer())
}

// Delivered records one delivery attempt. latency is observed only for
// attempts that got an ack (ok, retry, fail, invalid).
func (m *Metrics) Delivered(handler, kind, outcome string, latency time.Duration) {
	if m == nil {
		return
	}
	m.deliveries.WithLabelValues(handler, kind, outcome).Inc()
	switch outcome {
	case OutcomeOK, OutcomeRetry, OutcomeFail, OutcomeInvalid:
		m.ackLatency.WithLabelValues(handler, kind).Observe(latency.Seconds())
	}
}

// SetQueueDepth records the length of the handler's work queue.
func (m *Metrics) SetQueueDepth(handler string, n int) {
	if m == nil {
		return
	}
	m.queueDepth.WithLabelValues(handler).Set(float64(n))
}

// TimersScheduled records how many timer entries the handler has scheduled.
func (m *Metrics) TimersScheduled(handler string, n int) {
	if m == nil {
		return
	}
	m.timers.WithLabelValues(handler).Set(float64(n))
}

// HoldAdded records a hold added to an object.
func (m *Metrics) HoldAdded(handler string) {
	if m == nil {
		return
	}
	m.holdsAdded.WithLabelValues(handler).Inc()
}

// HoldReleased records a hold released from an object; reason is one of
// the Release constants.
func (m *Metrics) HoldReleased(handler, reason string) {
	if m == nil {
		return
	}
	m.holdsReleased.WithLabelValues(handler, reason).Inc()
}

// SessionOpened records a handler instance that connected.
func (m *Metrics) SessionOpened(handler string) {
	if m == nil {
		return
	}
	m.sessions.WithLabelValues(handler).Inc()
	m.sessionsTotal.WithLabelValues(handler).Inc()
}

// SessionClosed records the end of a session SessionOpened recorded.
func (m *Metrics) SessionClosed(handler string) {
	if m == nil {
		return
	}
	m.sessions.WithLabelValues(handler).Dec()
}

// APIWrite records one write to the API server: verb is VerbPatch or
// VerbStatusPatch, resource names what was written (e.g.
// "widgets.test.tether.dev"), code is WriteCode of its error.
func (m *Metrics) APIWrite(verb, resource, code string) {
	if m == nil {
		return
	}
	m.apiWrites.WithLabelValues(verb, resource, code).Inc()
}

// InformerListed records that an informer began listing every object of
// the resource.
func (m *Metrics) InformerListed(resource string) {
	if m == nil {
		return
	}
	m.lists.WithLabelValues(resource).Inc()
}

// HandlerPresent records whether an instance of the handler is connected.
// The first time a handler is seen, its hold counters are set to zero for
// every reason, so that rates start from a known value.
func (m *Metrics) HandlerPresent(handler string, present bool) {
	if m == nil {
		return
	}
	if _, seen := m.known.LoadOrStore(handler, true); !seen {
		m.holdsAdded.WithLabelValues(handler)
		for _, r := range ReleaseReasons {
			m.holdsReleased.WithLabelValues(handler, r)
		}
	}
	v := 0.0
	if present {
		v = 1
	}
	m.present.WithLabelValues(handler).Set(v)
}

// WriteCode classifies the error of an API write: CodeOK for nil,
// CodeConflict for 409 and 422 (a failed test guard), CodeNotFound for
// 404, the status class ("4xx", "5xx") for other API errors, and CodeError
// when there is no HTTP status.
func WriteCode(err error) string {
	if err == nil {
		return CodeOK
	}
	switch {
	case apierrors.IsConflict(err), apierrors.IsInvalid(err):
		return CodeConflict
	case apierrors.IsNotFound(err):
		return CodeNotFound
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		switch code := status.Status().Code; {
		case code >= 500 && code < 600:
			return "5xx"
		case code >= 400 && code < 500:
			return "4xx"
		}
	}
	return CodeError
}
