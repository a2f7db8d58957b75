package incluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/node"
	"github.com/tether-dev/tether/test/testenv"
)

// kubectl runs the project's kubectl against the cluster and returns its
// output, failing the test when it fails.
func kubectl(t *testing.T, c *node.Cluster, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Binaries().Kubectl, append([]string{"--kubeconfig", c.KubeconfigPath()}, args...)...)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// repoRoot is the repository's root folder, where deploy/ is.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := controlplane.FindRepoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// deployDir is deploy/ in the repository.
func deployDir(t *testing.T) string { return filepath.Join(repoRoot(t), "deploy") }

// followBrokerLogs copies the logs of the broker Pods running now, their
// relays' too, into the test's log when it fails: a Pod's own log is gone
// with the Pod, and an uninstall deletes them all.
func followBrokerLogs(t *testing.T, c *node.Cluster) {
	t.Helper()
	followLogs(t, c, tetherNS, brokerLabel, "the broker Pods")
}

// followLogs copies the logs of the Pods of ns that label selects,
// running now, into the test's log when it fails.
func followLogs(t *testing.T, c *node.Cluster, ns, label, what string) {
	t.Helper()
	var out testenv.Lines
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, c.Binaries().Kubectl, "--kubeconfig", c.KubeconfigPath(), "-n", ns,
		"logs", "-f", "--prefix", "--all-containers", "--tail=-1", "--max-log-requests=10", "-l", label)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("following the logs of %s: %v", what, err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s' logs:\n%s", what, out.Text())
		}
	})
}
