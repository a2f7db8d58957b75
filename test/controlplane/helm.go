package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// HelmVersion is the helm that installs and lints the chart deploy/helm/tether
// in the tests. It must match test/tools/helm/go.mod.
const HelmVersion = "v4.3.1"

const helmStampName = "stamp-helm"

// helmSet is what [EnsureHelm] builds: helm from a module of its own, told
// its version as helm's Makefile tells it (its source says only "v4.3").
var helmSet = binarySet{
	stamp:    helmStampName,
	versions: []string{"helm " + HelmVersion},
	targets: []target{{name: "helm", version: HelmVersion, pkg: "helm.sh/helm/v4/cmd/helm", module: "helm",
		ldflags: "-X helm.sh/helm/v4/internal/version.version=" + HelmVersion,
		want:    HelmVersion, versionArgs: []string{"version", "--short"}, hint: "about 5 minutes"}},
}

// EnsureHelm returns the path of the cached helm, building it first when it
// is missing, as [Ensure] does for the control plane's binaries (same cache
// folder, own stamp).
func EnsureHelm(ctx context.Context, opts EnsureOptions) (string, error) {
	return ensureOne(ctx, opts, helmSet)
}

// Helm runs the cached helm the way the tests do: in Dir, against
// Kubeconfig when set, with its caches, configuration and data under Home,
// so that nothing of the user's helm is read or written.
type Helm struct {
	Dir        string    // the working folder, where the charts' paths start
	Home       string    // helm's own files; a test's temporary folder
	Kubeconfig string    // the cluster's; empty for what needs none (lint, template)
	Progress   io.Writer // the progress of a first build of helm; nil: discarded
}

// Run runs helm with args, building it first when the cache lacks it (ctx
// bounds both), and returns its standard output, or an error that carries
// both outputs.
func (h Helm) Run(ctx context.Context, args ...string) (string, error) {
	path, err := EnsureHelm(ctx, EnsureOptions{Progress: h.Progress})
	if err != nil {
		return "", err
	}
	if h.Kubeconfig != "" {
		args = append([]string{"--kubeconfig", h.Kubeconfig}, args...)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = h.Dir
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(h.Home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.Home, "config"), "HELM_DATA_HOME="+filepath.Join(h.Home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, &stdout, &stderr)
	}
	return stdout.String(), nil
}
