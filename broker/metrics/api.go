package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Write verbs and codes for API.Wrote.
const (
	VerbPatch       = "patch"
	VerbStatusPatch = "status-patch"

	CodeOK       = "ok"
	CodeConflict = "conflict"  // 409, or 422 from a failed test guard: retried on the next state
	CodeNotFound = "not-found" // the object is gone; nothing to write
	CodeError    = "error"     // no HTTP status: transport, timeout, cancelled
)

// API is the metrics of the broker's work against the API server; a nil
// *API records nothing:
//
//	tether_api_writes_total{verb,resource,code}  counter
//	tether_informer_lists_total{resource}        counter
type API struct {
	writes *prometheus.CounterVec
	lists  *prometheus.CounterVec
}

func newAPI(reg prometheus.Registerer) *API {
	return &API{
		writes: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_api_writes_total",
			Help: "Writes to the API server by verb (patch, status-patch), resource and code (ok, conflict, not-found, 4xx, 5xx, error).",
		}, []string{"verb", "resource", "code"})),
		lists: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_informer_lists_total",
			Help: "Lists of a resource from zero by the broker's informers: at their start (unless a follower kept them warm) and when a watch is too old to resume (410 Gone).",
		}, []string{"resource"})),
	}
}

// API is the metrics of the broker's writes and lists.
func (m *Metrics) API() *API {
	if m == nil {
		return nil
	}
	return m.api
}

// Wrote records one write to the API server: verb is VerbPatch or
// VerbStatusPatch, resource names what was written (e.g.
// "widgets.test.tether.dev"), code is WriteCode of its error.
func (a *API) Wrote(verb, resource, code string) {
	if a == nil {
		return
	}
	a.writes.WithLabelValues(verb, resource, code).Inc()
}

// Listed records that an informer began listing every object of the
// resource.
func (a *API) Listed(resource string) {
	if a == nil {
		return
	}
	a.lists.WithLabelValues(resource).Inc()
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
