package incluster

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/node"
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

// waitFor polls check every 200ms until it returns nil, failing the test
// with the last error after timeout. It returns how long it waited.
func waitFor(t *testing.T, timeout time.Duration, what string, check func(context.Context) error) time.Duration {
	t.Helper()
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return time.Since(begin)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting %s for %s: %v", timeout, what, err)
		case <-tick.C:
		}
	}
}

// followBrokerLogs copies the logs of the broker Pods running now into the
// test's log when it fails: a Pod's own log is gone with the Pod, and an
// uninstall deletes them all.
func followBrokerLogs(t *testing.T, c *node.Cluster) {
	t.Helper()
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, c.Binaries().Kubectl, "--kubeconfig", c.KubeconfigPath(), "-n", tetherNS,
		"logs", "-f", "--prefix", "--tail=-1", "--max-log-requests=10", "-l", brokerLabel)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("following the broker's logs: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the broker Pods' logs:\n%s", out.String())
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
