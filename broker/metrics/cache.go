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

// CacheUsage is what the caches of one resource hold.
type CacheUsage struct {
	Objects int
	// Bytes counts the cached objects' JSON.
	Bytes int
}

// cache is tether_cached_objects and tether_cached_bytes, read from the
// informers' caches at every scrape rather than kept up to date on every
// event.
type cache struct {
	objects, bytes *prometheus.Desc
	usage          func() map[string]CacheUsage
}

func (c cache) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.objects
	ch <- c.bytes
}

func (c cache) Collect(ch chan<- prometheus.Metric) {
	for resource, u := range c.usage() {
		ch <- prometheus.MustNewConstMetric(c.objects, prometheus.GaugeValue, float64(u.Objects), resource)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(u.Bytes), resource)
	}
}

// ObserveCache publishes tether_cached_objects{resource} and
// tether_cached_bytes{resource}: the objects the broker holds in its caches
// and the bytes of their JSON, by resource, as usage returns them when
// scraped. It is registered on the registry New was given.
func (m *Metrics) ObserveCache(usage func() map[string]CacheUsage) {
	if m == nil || m.reg == nil {
		return
	}
	register(m.reg, prometheus.Collector(cache{
		objects: prometheus.NewDesc("tether_cached_objects",
			"Objects in the broker's informer caches, by resource (every namespace it watches).", []string{"resource"}, nil),
		bytes: prometheus.NewDesc("tether_cached_bytes",
			"Bytes of JSON of the objects in the broker's informer caches, by resource: the bulk of the memory they take.", []string{"resource"}, nil),
		usage: usage,
	}))
}
