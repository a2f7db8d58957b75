package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/controlplane"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tether-deploy-kubectl-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy:", err)
		os.Exit(1)
	}
	kubectlCacheDir = dir
	code := controlplane.RunTests(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// kubectlCacheDir keeps kubectl's discovery cache out of $HOME.
var kubectlCacheDir string

// repoRoot returns the repository root, where deploy/ is.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := controlplane.FindRepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// kubectlResult is one kubectl run.
type kubectlResult struct {
	args           []string
	stdout, stderr string
	err            error
}

func (r kubectlResult) String() string {
	return fmt.Sprintf("kubectl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.err, r.stdout, r.stderr)
}

// runKubectl runs the control plane's kubectl with its admin kubeconfig in
// the repository root.
func runKubectl(cp *controlplane.ControlPlane, root string, args ...string) kubectlResult {
	res := kubectlResult{args: args}
	bin := cp.Binaries().Kubectl
	if bin == "" {
		res.err = fmt.Errorf("no kubectl: the control plane was not started with binaries from controlplane.Ensure")
		return res
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	full := append([]string{"--kubeconfig", cp.KubeconfigPath(), "--cache-dir", kubectlCacheDir}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	res.err = cmd.Run()
	res.stdout, res.stderr = stdout.String(), stderr.String()
	return res
}

// kubectl runs kubectl and fails the test when it fails.
func kubectl(t testing.TB, cp *controlplane.ControlPlane, args ...string) kubectlResult {
	t.Helper()
	res := runKubectl(cp, repoRoot(t), args...)
	if res.err != nil {
		t.Fatal(res)
	}
	return res
}

// applied is the one 'kubectl apply -k deploy/' of this test binary; every
// test that needs the manifests in the cluster waits for it.
var applied struct {
	once sync.Once
	res  kubectlResult
}

// applyManifests applies deploy/ (once per test binary) and returns the
// control plane and the result of the apply.
func applyManifests(t testing.TB) (*controlplane.ControlPlane, kubectlResult) {
	t.Helper()
	cp := controlplane.Get(t)
	root := repoRoot(t)
	applied.once.Do(func() {
		applied.res = runKubectl(cp, root, "apply", "-k", "deploy/", "--server-side", "--field-manager=tether-deploy-test")
	})
	if applied.res.err != nil {
		t.Fatal(applied.res)
	}
	return cp, applied.res
}
