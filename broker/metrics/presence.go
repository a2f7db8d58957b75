package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Presence is the metrics of the handlers' instances; a nil *Presence
// records nothing:
//
//	tether_sessions{handler}          gauge
//	tether_sessions_total{handler}    counter
//	tether_handler_present{handler}   gauge, 1 or 0
//	tether_handler_orphaned{handler}  gauge, 1 or 0
type Presence struct {
	sessions      *prometheus.GaugeVec
	sessionsTotal *prometheus.CounterVec
	present       *prometheus.GaugeVec
	orphaned      *prometheus.GaugeVec
	holds         *Holds
	// known are the handlers whose hold counters were set to zero.
	known sync.Map
}

func newPresence(reg prometheus.Registerer, holds *Holds) *Presence {
	handler := []string{"handler"}
	return &Presence{
		holds: holds,
		sessions: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_sessions",
			Help: "Handler instances connected now.",
		}, handler)),
		sessionsTotal: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_sessions_total",
			Help: "Handler instance sessions opened.",
		}, handler)),
		present: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_handler_present",
			Help: "1 while at least one instance of the handler is connected, else 0.",
		}, handler)),
		orphaned: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tether_handler_orphaned",
			Help: "1 while the handler is absent, can no longer sign in (its ServiceAccount gone or its rights revoked), and keeps STRICT holds or webhooks that only `broker release --handler` ends; else 0.",
		}, handler)),
	}
}

// Presence is the metrics of the handlers' instances and sessions.
func (m *Metrics) Presence() *Presence {
	if m == nil {
		return nil
	}
	return m.presence
}

// Opened records a handler instance that connected.
func (p *Presence) Opened(handler string) {
	if p == nil {
		return
	}
	p.sessions.WithLabelValues(handler).Inc()
	p.sessionsTotal.WithLabelValues(handler).Inc()
}

// Closed records the end of a session Opened recorded.
func (p *Presence) Closed(handler string) {
	if p == nil {
		return
	}
	p.sessions.WithLabelValues(handler).Dec()
}

// Present records whether an instance of the handler is connected. The
// first time a handler is seen, its hold counters are set to zero for
// every reason, and it is not orphaned, so that rates and alerts start from
// a known value.
func (p *Presence) Present(handler string, present bool) {
	if p == nil {
		return
	}
	if _, seen := p.known.LoadOrStore(handler, true); !seen {
		p.holds.zero(handler)
		p.orphaned.WithLabelValues(handler)
	}
	p.present.WithLabelValues(handler).Set(gauge(present))
}

// Orphaned records whether the handler is orphaned; a handler released is
// forgotten (forget), so that its series goes.
func (p *Presence) Orphaned(handler string, orphaned, forget bool) {
	if p == nil {
		return
	}
	if forget {
		p.orphaned.DeleteLabelValues(handler)
		return
	}
	p.orphaned.WithLabelValues(handler).Set(gauge(orphaned))
}

// gauge is 1 for true and 0 for false.
func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
