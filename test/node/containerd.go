package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// PauseImage is the sandbox image containerd runs for every Pod: a static
// binary of test/node/pause, built and imported by the run itself.
const PauseImage = "tether.dev/pause:dev"

// containerdConfig is containerd's configuration for one run: its folders
// and socket under dir, runc from the system, CNI from the system's plugin
// folder with the run's own network, the run's pause image.
//
// restrict_oom_score_adj: root in this kind of sandbox lacks
// CAP_SYS_RESOURCE, and runc fails every sandbox when asked to lower its
// oom_score_adj. netns_mounts_under_state_dir keeps the Pods' network
// namespaces inside the run's folder, where teardown finds them.
func containerdConfig(dir, runc, cniBinDir, cniConfDir string) string {
	return fmt.Sprintf(`version = 3
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
    BinaryName = %q
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%q]
    conf_dir = %q

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %q

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), socketIn(dir), socketIn(dir)+".ttrpc",
		runc, cniBinDir, cniConfDir, PauseImage)
}

// socketIn is containerd's socket in its folder.
func socketIn(dir string) string { return filepath.Join(dir, "containerd.sock") }

// ctr runs containerd's client against the run's socket in the namespace
// the kubelet uses.
func (c *Cluster) ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.nodeBins.Ctr, append([]string{"--address", socketIn(c.containerdDir), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// awaitContainerd waits until containerd answers on its socket.
func (c *Cluster) awaitContainerd(ctx context.Context) error {
	return c.waitFor(ctx, c.containerd, func(ctx context.Context) error {
		_, err := c.ctr(ctx, "version")
		return err
	})
}

// ImportImage imports an image tarball (as test/image writes it) into the
// node's containerd, where Pods whose imagePullPolicy is Never or
// IfNotPresent find it by the tarball's tag.
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	if _, err := c.ctr(ctx, "images", "import", tarball); err != nil {
		return fmt.Errorf("importing %s into the node: %w", tarball, err)
	}
	return nil
}

// containerProcesses returns the pids of every shim of containerd in
// stateDir (a shim's command line names containerd's socket) and of the
// processes below them, the containers, children first.
func containerProcesses(marker string) []int {
	parent := map[int]int{}
	var shims []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		parent[pid] = parentOf(string(stat))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(cmdline), "containerd-shim") && strings.Contains(string(cmdline), marker) {
			shims = append(shims, pid)
		}
	}
	isShim := map[int]bool{}
	for _, s := range shims {
		isShim[s] = true
	}
	var below []int
	for pid := range parent {
		for p := parent[pid]; p > 1; p = parent[p] {
			if isShim[p] {
				below = append(below, pid)
				break
			}
		}
	}
	return append(below, shims...)
}

// parentOf is the parent's pid in a /proc/<pid>/stat line, "pid (comm) state
// ppid ...": comm may hold spaces and parentheses, so the fields are counted
// from the last ')'. 0 when the line is not of that form.
func parentOf(stat string) int {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}
