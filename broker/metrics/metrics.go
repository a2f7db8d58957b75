package metrics

import (
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	ReleaseRequested        = "requested"          // `broker release --handler` acted on by a running broker
)

// ReleaseReasons lists every release reason.
var ReleaseReasons = []string{
	ReleaseDone, ReleaseNoLongerMatching, ReleaseAbsent,
	ReleaseLongAbsent, ReleaseUninstall, ReleaseDaemonTimeout, ReleaseRequested,
}

// AckLatencyBuckets span 1 ms to 60 s.
var AckLatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Metrics are the broker's metrics. The zero value is not usable; a nil
// *Metrics is, and records nothing.
type Metrics struct {
	gatherer prometheus.Gatherer
	reg      prometheus.Registerer

	deliveries *prometheus.CounterVec
	ackLatency *prometheus.HistogramVec
	queueDepth *prometheus.GaugeVec
	timers     *prometheus.GaugeVec
	leader     prometheus.Gauge
	admission  *Admission
	signin     *SignIn
	holds      *Holds
	presence   *Presence
	api        *API
	bindings   bindingMetrics
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
	m.timers = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tether_timers_scheduled",
		Help: "Timer ticks and daemon restarts scheduled for the handler, sampled.",
	}, handler))
	m.leader = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tether_leader",
		Help: "1 while this replica leads (watches, dispatches, holds and writes), else 0: a follower, or a broker stopping.",
	}))
	m.admission = newAdmission(reg)
	m.signin = newSignIn(reg)
	m.bindings = newBindingMetrics(reg)
	m.holds = newHolds(reg, m.bindings.retrying)
	m.presence = newPresence(reg, m.holds)
	m.api = newAPI(reg)
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

// Leading records whether this replica leads.
func (m *Metrics) Leading(leading bool) {
	if m == nil {
		return
	}
	m.leader.Set(gauge(leading))
}
