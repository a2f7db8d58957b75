package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// What the node takes from the machine: Debian's runc, CNI plugins, iptables
// (kube-proxy's) and iproute2.
const (
	runcPath  = "/usr/sbin/runc"
	cniBinDir = "/usr/lib/cni"
	// runDirPrefix starts the name of every run's temporary folder; a shim's
	// command line holds it (containerd's socket is in the folder), which is
	// how the processes of a run that died are found.
	runDirPrefix = "tether-node-"
	// lockPath is held by the one run on the machine.
	lockPath = "/run/tether-node.lock"
)

// ErrMachine marks a machine that cannot run a node: not root, or without
// the system packages the node uses.
var ErrMachine = errors.New("this machine cannot run a node")

// CheckMachine reports what the machine lacks to run a node, if anything:
// root, and Debian's runc, containernetworking-plugins, iptables and
// iproute2 (.ci/run installs them).
func CheckMachine() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the node makes a bridge, mounts and iptables rules)")
	}
	for path, pkg := range map[string]string{
		runcPath:                            "runc",
		filepath.Join(cniBinDir, "bridge"):  "containernetworking-plugins",
		filepath.Join(cniBinDir, "portmap"): "containernetworking-plugins",
		"iptables":                          "iptables",
		"ip":                                "iproute2",
	} {
		if _, err := exec.LookPath(path); err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", path, pkg))
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("%w: it needs %s", ErrMachine, strings.Join(missing, ", "))
	}
	return nil
}

// machineLock is the machine's node lock, held by the one run. Its file
// names the holder's process and folder; a run that ends cleanly empties
// it, so a file that is not empty when the lock is taken names a run that
// died, whose leftovers the next run removes.
type machineLock struct {
	f *os.File
	// previous is the folder of the run that died holding the lock, if any.
	previous string
}

// lockMachine takes the machine's node lock, waiting while another run
// holds it (one at a time: they share the bridge and the kubelet's port).
func lockMachine(ctx context.Context, progress io.Writer) (*machineLock, error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the node lock %s: %w", lockPath, err)
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for announced := false; unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil; {
		if !announced {
			holder, _ := os.ReadFile(lockPath)
			fmt.Fprintf(progress, "node: another node runs on this machine (%s holds %s); waiting for it to stop\n",
				strings.TrimSpace(string(holder)), lockPath)
			announced = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for another node on this machine to stop: %w", ctx.Err())
		case <-tick.C:
		}
	}
	l := &machineLock{f: f}
	if held, _ := os.ReadFile(lockPath); len(held) > 0 {
		if _, dir, ok := strings.Cut(strings.TrimSpace(string(held)), " "); ok {
			l.previous = dir
		}
	}
	return l, nil
}

// record writes this run's process and folder into the lock file.
func (l *machineLock) record(dir string) {
	_ = l.f.Truncate(0)
	_, _ = l.f.WriteAt([]byte(fmt.Sprintf("%d %s\n", os.Getpid(), dir)), 0)
}

// release empties the lock file (this run ended cleanly) and unlocks it.
func (l *machineLock) release() {
	_ = l.f.Truncate(0)
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	_ = l.f.Close()
}

// removeLeftovers ends what a run that died left: its containers, mounts
// and, when it was a temporary one, its folder; and the temporary folders
// of older runs. It runs under the machine lock, so no run of theirs is
// alive. The bridge is made again by setupNetwork.
func removeLeftovers(log hclog.Logger, previous string) error {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), runDirPrefix+"*"))
	if previous != "" {
		log.Info("cleaning up after a node that died", "dir", previous)
		killContainers(previous)
		if err := unmountUnder(previous); err != nil {
			return err
		}
	}
	if len(containerProcesses(filepath.Join(os.TempDir(), runDirPrefix))) > 0 {
		killContainers(filepath.Join(os.TempDir(), runDirPrefix))
	}
	for _, dir := range dirs {
		log.Info("removing the folder of a node that died", "dir", dir)
		if err := unmountUnder(dir); err != nil {
			return err
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing the folder of a node that died: %w", err)
		}
	}
	return nil
}

// killContainers SIGKILLs every container of the containerd whose folder
// starts with marker, and their shims, and waits up to 10s for them to go.
func killContainers(marker string) {
	pids := containerProcesses(marker)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil && !zombie(pid) {
			time.Sleep(20 * time.Millisecond) // a killed process has no event to wait on
		}
	}
}

// zombie reports whether pid has exited and waits to be reaped.
func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && len(stat) > i+2 && stat[i+2] == 'Z'
}

// unmountUnder unmounts (lazily, deepest first) every mount below dir:
// containers' root filesystems, Pods' volumes and network namespaces.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
