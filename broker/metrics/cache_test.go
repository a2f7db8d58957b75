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

func TestCachedObjectsAreReadAtScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	counts := map[string]int{"secrets": 3}
	m.ObserveCache(func() map[string]int { return counts })
	read := func() map[string]float64 {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, f := range families {
			if f.GetName() != "tether_cached_objects" {
				continue
			}
			for _, s := range f.GetMetric() {
				out[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
			}
		}
		return out
	}
	if got := read(); got["secrets"] != 3 || len(got) != 1 {
		t.Errorf("cached objects %v, want secrets 3", got)
	}
	counts = map[string]int{"secrets": 1, "widgets.test.tether.dev": 5}
	if got := read(); got["secrets"] != 1 || got["widgets.test.tether.dev"] != 5 {
		t.Errorf("cached objects %v after the caches changed", got)
	}
	var none *Metrics
	none.ObserveCache(func() map[string]int { return nil }) // nil is a no-op
}
