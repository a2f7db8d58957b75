package controlplane

import (
	"context"
)

// PrometheusVersion is the Prometheus release whose promtool checks the
// alerting rules. Its Go module is v0.316.0, as test/tools/promtool/go.mod
// names it.
const PrometheusVersion = "3.16.0"

// promtoolSet is what [EnsurePromtool] builds: promtool from a module of its
// own, without the service discovery plugins (remove_all_sd), which rule
// checks do not use and which would double its build, told its version as
// Prometheus's Makefile tells it.
var promtoolSet = binarySet{
	stamp:    "stamp-promtool",
	versions: []string{"prometheus " + PrometheusVersion},
	targets: []target{{name: "promtool", version: PrometheusVersion, pkg: "github.com/prometheus/prometheus/cmd/promtool",
		module: "promtool", tags: "remove_all_sd",
		ldflags: "-X github.com/prometheus/common/version.Version=" + PrometheusVersion,
		want:    "version " + PrometheusVersion, hint: "about 4 minutes"}},
}

// EnsurePromtool returns the path of the cached promtool, building it
// first when it is missing, as [Ensure] does for the control plane's
// binaries (same cache folder, own stamp).
func EnsurePromtool(ctx context.Context, opts EnsureOptions) (string, error) {
	return ensureOne(ctx, opts, promtoolSet)
}
