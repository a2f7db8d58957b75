package metrics

import "github.com/prometheus/client_golang/prometheus"

// ReleaseRequested is the release reason of `broker release --handler`
// acted on by a running broker.
const ReleaseRequested = "requested"

// orphanMetrics say which handlers are orphaned:
//
//	tether_handler_orphaned{handler} gauge
type orphanMetrics struct {
	orphaned *prometheus.GaugeVec
}

func newOrphanMetrics(reg prometheus.Registerer) orphanMetrics {
	return orphanMetrics{orphaned: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tether_handler_orphaned",
		Help: "1 while the handler is absent, can no longer sign in (its ServiceAccount gone or its rights revoked), and keeps STRICT holds or webhooks that only `broker release --handler` ends; else 0.",
	}, []string{"handler"}))}
}

// HandlerOrphaned records whether the handler is orphaned; a handler
// released is forgotten (forget), so that its series goes.
func (m *Metrics) HandlerOrphaned(handler string, orphaned, forget bool) {
	if m == nil {
		return
	}
	if forget {
		m.orphans.orphaned.DeleteLabelValues(handler)
		return
	}
	v := 0.0
	if orphaned {
		v = 1
	}
	m.orphans.orphaned.WithLabelValues(handler).Set(v)
}
