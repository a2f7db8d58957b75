package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestResource(t *testing.T) {
	for gr, want := range map[schema.GroupResource]string{
		{Group: "test.tether.dev", Resource: "widgets"}: "widgets.test.tether.dev",
		{Resource: "secrets"}:                           "secrets",
	} {
		if got := Resource(gr); got != want {
			t.Errorf("Resource(%v) = %q, want %q", gr, got, want)
		}
	}
}

func TestCacheUsageIsReadAtScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	usage := map[string]CacheUsage{"secrets": {Objects: 3, Bytes: 900}}
	m.ObserveCache(func() map[string]CacheUsage { return usage })
	read := func(name string) map[string]float64 {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, s := range f.GetMetric() {
				out[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
			}
		}
		return out
	}
	if got := read("tether_cached_objects"); got["secrets"] != 3 || len(got) != 1 {
		t.Errorf("cached objects %v, want secrets 3", got)
	}
	if got := read("tether_cached_bytes"); got["secrets"] != 900 || len(got) != 1 {
		t.Errorf("cached bytes %v, want secrets 900", got)
	}
	usage = map[string]CacheUsage{"secrets": {Objects: 1, Bytes: 300}, "widgets.test.tether.dev": {Objects: 5, Bytes: 2500}}
	if got := read("tether_cached_objects"); got["secrets"] != 1 || got["widgets.test.tether.dev"] != 5 {
		t.Errorf("cached objects %v after the caches changed", got)
	}
	if got := read("tether_cached_bytes"); got["secrets"] != 300 || got["widgets.test.tether.dev"] != 2500 {
		t.Errorf("cached bytes %v after the caches changed", got)
	}
	var none *Metrics
	none.ObserveCache(func() map[string]CacheUsage { return nil }) // nil is a no-op
}
