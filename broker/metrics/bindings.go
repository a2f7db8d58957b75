package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Outcomes lists every delivery outcome, in the order of a Binding's
// counters.
var Outcomes = []string{OutcomeOK, OutcomeRetry, OutcomeFail, OutcomeInvalid, OutcomeTimeout, OutcomeGone}

// bindingMetrics are the metrics of a handler's bindings and holds:
//
//	tether_binding_deliveries_total{handler,binding,outcome} counter
//	tether_binding_run_seconds{handler,binding}              histogram, acked attempts only
//	tether_binding_retrying{handler,binding}                 gauge
//	tether_queue_wait_seconds{handler}                       histogram
//	tether_objects_held{handler}                             gauge
//	tether_hold_stuck_seconds{handler}                       gauge
//	tether_holds_stuck{handler}                              gauge
//
// Binding ids are those the handler declared at Hello, so the series are
// bounded by the bindings of the handlers connected or restored; a
// handler's series go when it is forgotten (ForgetHandler).
type bindingMetrics struct {
	deliveries *prometheus.CounterVec
	run        *prometheus.HistogramVec
	retrying   *prometheus.GaugeVec
	queueWait  *prometheus.HistogramVec
}

func newBindingMetrics(reg prometheus.Registerer) bindingMetrics {
	handler := []string{"handler"}
	return bindingMetrics{
		deliveries: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_binding_deliveries_total",
			Help: "Delivery attempts by handler, binding and outcome (ok, retry, fail, invalid, timeout, gone).",
		}, []string{"handler", "binding", "outcome"})),
		run: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tether_binding_run_seconds",
			Help:    "Time from the start of a delivery attempt to its ack, by handler and binding: the handler's run time and the wait for a window slot.",
			Buckets: AckLatencyBuckets,
		}, []string{"handler", "binding"})),
		retrying: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_binding_retrying",
			Help: "Objects whose binding asked to be retried and has not answered OK or FAIL since, sampled every few seconds.",
		}, []string{"handler", "binding"})),
		queueWait: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tether_queue_wait_seconds",
			Help:    "Time an object waited in the handler's work queue before a worker took it.",
			Buckets: AckLatencyBuckets,
		}, handler)),
	}
}

// Binding is one binding's delivery metrics, bound to their labels once so
// that a delivery costs no label lookup. A nil *Binding records nothing.
type Binding struct {
	outcomes [6]prometheus.Counter // in the order of Outcomes
	run      prometheus.Observer
}

// Binding returns the delivery metrics of a handler's binding.
func (m *Metrics) Binding(handler, binding string) *Binding {
	if m == nil {
		return nil
	}
	b := &Binding{run: m.bindings.run.WithLabelValues(handler, binding)}
	for i, o := range Outcomes {
		b.outcomes[i] = m.bindings.deliveries.WithLabelValues(handler, binding, o)
	}
	m.bindings.retrying.WithLabelValues(handler, binding)
	return b
}

// Delivered records one delivery attempt of the binding; took is observed
// for attempts that got an ack (ok, retry, fail, invalid).
func (b *Binding) Delivered(outcome string, took time.Duration) {
	if b == nil {
		return
	}
	for i, o := range Outcomes {
		if o == outcome {
			b.outcomes[i].Inc()
			if i <= 3 { // ok, retry, fail, invalid: acked
				b.run.Observe(took.Seconds())
			}
			return
		}
	}
}

// ForgetHandler deletes the handler's series of its bindings and holds: it
// was forgotten or uninstalled, and its binding ids may never come back.
func (m *Metrics) ForgetHandler(handler string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"handler": handler}
	b := m.bindings
	b.deliveries.DeletePartialMatch(l)
	b.run.DeletePartialMatch(l)
	b.retrying.DeletePartialMatch(l)
	b.queueWait.DeletePartialMatch(l)
	m.holds.forget(l)
}

// QueueMetrics is the workqueue.MetricsProvider of a handler's work queue:
// it records only the wait in the queue (tether_queue_wait_seconds), since
// the depth is tether_queue_depth already.
func (m *Metrics) QueueMetrics(handler string) workqueue.MetricsProvider {
	if m == nil {
		return nil
	}
	return queueProvider{wait: m.bindings.queueWait.WithLabelValues(handler)}
}

type queueProvider struct{ wait prometheus.Observer }

type noMetric struct{}

func (noMetric) Inc()            {}
func (noMetric) Dec()            {}
func (noMetric) Set(float64)     {}
func (noMetric) Observe(float64) {}

func (p queueProvider) NewDepthMetric(string) workqueue.GaugeMetric  { return noMetric{} }
func (p queueProvider) NewAddsMetric(string) workqueue.CounterMetric { return noMetric{} }
func (p queueProvider) NewLatencyMetric(string) workqueue.HistogramMetric {
	return p.wait
}
func (p queueProvider) NewWorkDurationMetric(string) workqueue.HistogramMetric { return noMetric{} }
func (p queueProvider) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noMetric{}
}
func (p queueProvider) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noMetric{}
}
func (p queueProvider) NewRetriesMetric(string) workqueue.CounterMetric { return noMetric{} }
