package testenv

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tether-dev/tether/test/controlplane"
)

// Monitoring files are the alerting rules and the Grafana dashboard the chart
// ships, relative to the repository root.
var MonitoringFiles = []string{"deploy/helm/tether/files/alerts.yaml", "deploy/helm/tether/files/dashboard.json"}

// metricName finds the broker's metric names in a rule or a panel's query.
var metricName = regexp.MustCompile(`\btether_[a-z_]+`)

// MonitoredMetrics returns the broker's metric families the shipped alerts
// and dashboard query, sorted: a histogram's _bucket, _sum and _count
// series are its family's.
func MonitoredMetrics(t testing.TB) []string {
	t.Helper()
	root, err := controlplane.FindRepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range MonitoringFiles {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range metricName.FindAllString(string(data), -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				n = strings.TrimSuffix(n, suffix)
			}
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
