package metrics

import "github.com/prometheus/client_golang/prometheus"

// Answers of a SubjectAccessReview, for AccessReviewed.
const (
	AccessAllowed = "allowed"
	AccessDenied  = "denied"
	AccessError   = "error" // no answer: the API server unreachable, or the client's budget spent
)

// Why a Hello was turned away before any review, for HelloThrottled.
const (
	ThrottledIdentity = "identity" // its identity had as many Hellos under way as it may
	ThrottledBroker   = "broker"   // the broker had as many Hellos under way as it takes
)

// signinMetrics are what signing in costs:
//
//	tether_access_reviews_total{result}   counter
//	tether_hellos_throttled_total{reason} counter
type signinMetrics struct {
	reviews   *prometheus.CounterVec
	throttled *prometheus.CounterVec
}

func newSigninMetrics(reg prometheus.Registerer) signinMetrics {
	m := signinMetrics{
		reviews: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_access_reviews_total",
			Help: "SubjectAccessReviews the broker asked, of handlers' rights and of scrapers of /metrics, by result (allowed, denied, error); answers taken from its cache are not counted.",
		}, []string{"result"})),
		throttled: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_hellos_throttled_total",
			Help: "Hellos told ResourceExhausted before any review because too many were under way, for their identity (identity) or in all (broker).",
		}, []string{"reason"})),
	}
	for _, r := range []string{AccessAllowed, AccessDenied, AccessError} {
		m.reviews.WithLabelValues(r)
	}
	for _, r := range []string{ThrottledIdentity, ThrottledBroker} {
		m.throttled.WithLabelValues(r)
	}
	return m
}

// AccessReviewed records one SubjectAccessReview asked of the API server;
// result is AccessAllowed, AccessDenied or AccessError.
func (m *Metrics) AccessReviewed(result string) {
	if m == nil {
		return
	}
	m.signin.reviews.WithLabelValues(result).Inc()
}

// HelloThrottled records a Hello turned away for reason, ThrottledIdentity
// or ThrottledBroker.
func (m *Metrics) HelloThrottled(reason string) {
	if m == nil {
		return
	}
	m.signin.throttled.WithLabelValues(reason).Inc()
}
