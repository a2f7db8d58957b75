package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of an admission review, for Admission.Reviewed.
const (
	AdmissionAllowed = "allowed"
	AdmissionDenied  = "denied"
	AdmissionError   = "error" // the handler failed; the binding's failure policy answered
)

// Why a handler's admission webhook failed, for Admission.Failed.
const (
	AdmissionTimeout         = "timeout"          // no answer within the webhook's deadline
	AdmissionNoInstance      = "no-instance"      // no instance of the handler is connected
	AdmissionInvalidResponse = "invalid-response" // no admission answer, or a patch that does not apply
	AdmissionHandlerError    = "error"            // any other failure of the handler or its stream
)

// AdmissionLatencyBuckets span 1 ms to 30 s, the longest webhook timeout.
var AdmissionLatencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Admission is the metrics of the admission endpoint; a nil *Admission
// records nothing:
//
//	tether_admission_review_duration_seconds{handler,binding,result}  histogram
//	tether_admission_failures_total{handler,binding,policy,reason}    counter
type Admission struct {
	reviews  *prometheus.HistogramVec
	failures *prometheus.CounterVec
}

func newAdmission(reg prometheus.Registerer) *Admission {
	return &Admission{
		reviews: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tether_admission_review_duration_seconds",
			Help:    "Time to answer an admission review, by handler, binding and result (allowed, denied, error).",
			Buckets: AdmissionLatencyBuckets,
		}, []string{"handler", "binding", "result"})),
		failures: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_admission_failures_total",
			Help: "Admission reviews answered by the binding's failure policy (Ignore, Fail), by reason (timeout, no-instance, invalid-response, error).",
		}, []string{"handler", "binding", "policy", "reason"})),
	}
}

// Reviewed records one admission review of a known binding:
// result is AdmissionAllowed, AdmissionDenied or AdmissionError.
func (a *Admission) Reviewed(handler, binding, result string, took time.Duration) {
	if a == nil {
		return
	}
	a.reviews.WithLabelValues(handler, binding, result).Observe(took.Seconds())
}

// Failed records a review answered by the binding's failure
// policy ("Ignore" or "Fail"); reason is one of the Admission reason
// constants.
func (a *Admission) Failed(handler, binding, policy, reason string) {
	if a == nil {
		return
	}
	a.failures.WithLabelValues(handler, binding, policy, reason).Inc()
}

// Admission is the metrics of admission reviews.
func (m *Metrics) Admission() *Admission {
	if m == nil {
		return nil
	}
	return m.admission
}
