package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Holds is the metrics of a handler's holds; a nil *Holds records nothing:
//
//	tether_holds_added_total{handler}               counter
//	tether_holds_released_total{handler,reason}     counter
//	tether_objects_held{handler}                    gauge
//	tether_hold_stuck_seconds{handler}              gauge
//	tether_holds_stuck{handler}                     gauge
//	tether_binding_retrying{handler,binding}        gauge (also a binding's)
type Holds struct {
	added    *prometheus.CounterVec
	released *prometheus.CounterVec
	held     *prometheus.GaugeVec
	stuckFor *prometheus.GaugeVec
	stuck    *prometheus.GaugeVec
	retrying *prometheus.GaugeVec
}

func newHolds(reg prometheus.Registerer, retrying *prometheus.GaugeVec) *Holds {
	handler := []string{"handler"}
	return &Holds{
		retrying: retrying,
		added: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_holds_added_total",
			Help: "Holds (finalizers tether.dev/<handler>) added to objects.",
		}, handler)),
		released: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_holds_released_total",
			Help: "Holds released from objects, by reason (done, no-longer-matching, absent, long-absent, uninstall, daemon-timeout, requested).",
		}, []string{"handler", "reason"})),
		held: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_objects_held",
			Help: "Objects in the broker's caches that carry the handler's hold, sampled every few seconds.",
		}, handler)),
		stuckFor: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_hold_stuck_seconds",
			Help: "Age of the oldest hold of the handler on an object being deleted (seconds since its deletionTimestamp), 0 when none; sampled every few seconds.",
		}, handler)),
		stuck: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_holds_stuck",
			Help: "Objects being deleted that the handler has held for longer than --stuck-after.",
		}, handler)),
	}
}

// Holds is the metrics of the handlers' holds.
func (m *Metrics) Holds() *Holds {
	if m == nil {
		return nil
	}
	return m.holds
}

// Added records a hold added to an object.
func (h *Holds) Added(handler string) {
	if h == nil {
		return
	}
	h.added.WithLabelValues(handler).Inc()
}

// Released records a hold released from an object; reason is one of the
// Release constants.
func (h *Holds) Released(handler, reason string) {
	if h == nil {
		return
	}
	h.released.WithLabelValues(handler, reason).Inc()
}

// HoldSample is a sample of a handler's holds, for Holds.Sampled.
type HoldSample struct {
	// Held counts the objects carrying the hold.
	Held int
	// Retrying counts, by binding id, the objects whose binding is retrying.
	Retrying map[string]int
	// OldestStuck is the age of the oldest hold on an object being deleted.
	OldestStuck time.Duration
	// Stuck counts the objects held past --stuck-after.
	Stuck int
}

// Sampled records a sample of the handler's holds. bindings are the ids
// of all its bindings: those not in s.Retrying are set to zero.
func (h *Holds) Sampled(handler string, bindings []string, s HoldSample) {
	if h == nil {
		return
	}
	for _, id := range bindings {
		h.retrying.WithLabelValues(handler, id).Set(float64(s.Retrying[id]))
	}
	h.held.WithLabelValues(handler).Set(float64(s.Held))
	h.stuckFor.WithLabelValues(handler).Set(s.OldestStuck.Seconds())
	h.stuck.WithLabelValues(handler).Set(float64(s.Stuck))
}

// zero makes the handler's counters start at zero for every reason, so
// that rates start from a known value.
func (h *Holds) zero(handler string) {
	h.added.WithLabelValues(handler)
	for _, r := range ReleaseReasons {
		h.released.WithLabelValues(handler, r)
	}
}

// forget deletes the series of the sampled gauges that match l.
func (h *Holds) forget(l prometheus.Labels) {
	h.held.DeletePartialMatch(l)
	h.stuckFor.DeletePartialMatch(l)
	h.stuck.DeletePartialMatch(l)
}
