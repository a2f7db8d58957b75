package metrics

import "github.com/prometheus/client_golang/prometheus"

// Answers of a SubjectAccessReview, for SignIn.Reviewed.
const (
	AccessAllowed = "allowed"
	AccessDenied  = "denied"
	AccessError   = "error" // no answer: the API server unreachable, or the client's budget spent
)

// Why a Hello was turned away before any review, for SignIn.Throttled.
const (
	ThrottledIdentity = "identity" // its identity had as many Hellos under way as it may
	ThrottledBroker   = "broker"   // the broker had as many Hellos under way as it takes
)

// SignIn is the metrics of what signing in costs; a nil *SignIn records
// nothing:
//
//	tether_access_reviews_total{result}   counter
//	tether_hellos_throttled_total{reason} counter
type SignIn struct {
	reviews   *prometheus.CounterVec
	throttled *prometheus.CounterVec
}

func newSignIn(reg prometheus.Registerer) *SignIn {
	m := &SignIn{
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

// Reviewed records one SubjectAccessReview asked of the API server;
// result is AccessAllowed, AccessDenied or AccessError.
func (s *SignIn) Reviewed(result string) {
	if s == nil {
		return
	}
	s.reviews.WithLabelValues(result).Inc()
}

// Throttled records a Hello turned away for reason, ThrottledIdentity
// or ThrottledBroker.
func (s *SignIn) Throttled(reason string) {
	if s == nil {
		return
	}
	s.throttled.WithLabelValues(reason).Inc()
}

// SignIn is the metrics of signing in: access reviews and Hellos turned
// away.
func (m *Metrics) SignIn() *SignIn {
	if m == nil {
		return nil
	}
	return m.signin
}
