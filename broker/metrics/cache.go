package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resource names a resource in labels as kubectl does:
// "widgets.test.tether.dev", "secrets".
func Resource(gr schema.GroupResource) string {
	if gr.Group == "" {
		return gr.Resource
	}
	return gr.Resource + "." + gr.Group
}

// cachedObjects is tether_cached_objects, read from the informers' caches
// at every scrape rather than kept up to date on every event.
type cachedObjects struct {
	desc   *prometheus.Desc
	counts func() map[string]int
}

func (c cachedObjects) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c cachedObjects) Collect(ch chan<- prometheus.Metric) {
	for resource, n := range c.counts() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), resource)
	}
}

// ObserveCache publishes tether_cached_objects{resource}: the objects the
// broker holds in its caches, by resource, as counts returns them when
// scraped. It is registered on the registry New was given.
func (m *Metrics) ObserveCache(counts func() map[string]int) {
	if m == nil || m.reg == nil {
		return
	}
	register(m.reg, prometheus.Collector(cachedObjects{
		desc: prometheus.NewDesc("tether_cached_objects",
			"Objects in the broker's informer caches, by resource (every namespace it watches).", []string{"resource"}, nil),
		counts: counts,
	}))
}
