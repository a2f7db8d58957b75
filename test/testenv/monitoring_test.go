package testenv

import (
	"slices"
	"testing"
)

// The names come from both files, histograms by their family's name.
func TestMonitoredMetricsReadsTheAlertsAndTheDashboard(t *testing.T) {
	names := MonitoredMetrics(t)
	for _, want := range []string{"tether_leader", "tether_holds_stuck", "tether_binding_run_seconds", "tether_cached_bytes"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s is not among %v", want, names)
		}
	}
	if slices.Contains(names, "tether_binding_run_seconds_bucket") {
		t.Errorf("a histogram's series is named, not its family: %v", names)
	}
}
