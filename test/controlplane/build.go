package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// EnsureOptions configures [Ensure]. The zero value uses the defaults.
type EnsureOptions struct {
	// Dir is the cache folder. Zero: [CacheDir].
	Dir string
	// ToolsDir is the module the binaries are built from. Zero: test/tools in
	// the repository root found by walking up from the working directory.
	ToolsDir string
	// Progress receives human-readable build progress (what is built, elapsed
	// time every ProgressInterval). Nil: discarded.
	Progress io.Writer
	// ProgressInterval is how often a running build reports. Zero: 30s.
	ProgressInterval time.Duration
	// Log receives structured logs. Nil: none.
	Log hclog.Logger
	// GoCommand is the go tool to build with. Zero: "go" from PATH.
	GoCommand string
}

func (o *EnsureOptions) setDefaults() error {
	if o.Dir == "" {
		d, err := CacheDir()
		if err != nil {
			return err
		}
		o.Dir = d
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	if o.GoCommand == "" {
		o.GoCommand = "go"
	}
	return nil
}

// Ensure returns the cached etcd, kube-apiserver and kubectl, building them
// first when they are missing. When every binary and the stamp of a verified
// build are in the cache folder it returns at once without running anything.
// Otherwise it takes an exclusive lock on the folder (so concurrent test
// packages build only once), checks binaries that are already there with
// --version ('version --client' for kubectl), builds the missing or wrong ones
// with 'go build' in test/tools into a temporary name, renames them into place
// and writes the stamp. The first kube-apiserver build takes about 10 minutes
// on 2 cores; kubectl, built after it, shares most of its packages and takes a
// minute or two more.
func Ensure(ctx context.Context, opts EnsureOptions) (Binaries, error) {
	if err := opts.setDefaults(); err != nil {
		return Binaries{}, fmt.Errorf("ensuring control-plane binaries: %w", err)
	}
	if err := ensureSet(ctx, &opts, controlPlaneSet); err != nil {
		return Binaries{}, err
	}
	return binariesIn(opts.Dir), nil
}

// ensureOne is ensureSet for a set of one binary, a tool the tests run
// (helm, jaeger, promtool): it returns the cached binary's path.
func ensureOne(ctx context.Context, opts EnsureOptions, set binarySet) (string, error) {
	name := set.targets[0].name
	if err := opts.setDefaults(); err != nil {
		return "", fmt.Errorf("ensuring %s: %w", name, err)
	}
	if err := ensureSet(ctx, &opts, set); err != nil {
		return "", err
	}
	return filepath.Join(opts.Dir, name), nil
}

// ensureSet makes the cache folder hold every binary of set and its stamp,
// as Ensure describes.
func ensureSet(ctx context.Context, opts *EnsureOptions, set binarySet) error {
	dir := opts.Dir
	if set.ready(dir) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the binary cache folder: %w", err)
	}
	unlock, err := lockDir(ctx, dir, opts.Progress)
	if err != nil {
		return err
	}
	defer unlock()
	if set.ready(dir) { // another process finished a build while we waited
		return nil
	}
	for _, t := range set.targets {
		path := filepath.Join(dir, t.name)
		if isExecutable(path) {
			if err := checkVersion(ctx, path, t.want, t.versionArgs...); err == nil {
				opts.Log.Debug("binary already present", "path", path)
				continue
			} else {
				opts.Log.Info("rebuilding binary", "path", path, "reason", err)
			}
		}
		if opts.ToolsDir == "" {
			wd, err := os.Getwd()
			if err != nil {
				return fmt.Errorf("finding the working directory to locate test/tools: %w", err)
			}
			root, err := FindRepoRoot(wd)
			if err != nil {
				return fmt.Errorf("locating test/tools to build %s (run from inside the repository, or put prebuilt binaries and a stamp in %s via %s): %w", t.name, dir, EnvDir, err)
			}
			opts.ToolsDir = filepath.Join(root, "test", "tools")
		}
		if err := buildBinary(ctx, opts, t, path); err != nil {
			return err
		}
		if err := checkVersion(ctx, path, t.want, t.versionArgs...); err != nil {
			return fmt.Errorf("checking the freshly built %s: %w", t.name, err)
		}
	}
	if err := set.writeStamp(dir); err != nil {
		return fmt.Errorf("recording the verified binaries in %s: %w", dir, err)
	}
	return nil
}

// apiserverLDFlags makes kube-apiserver (and kubectl) report the pinned
// version instead of v0.0.0-master.
func apiserverLDFlags() string {
	parts := strings.Split(strings.TrimPrefix(KubernetesVersion, "v"), ".") // major, minor, patch
	return "-X k8s.io/component-base/version.gitVersion=" + KubernetesVersion +
		" -X k8s.io/component-base/version.gitMajor=" + parts[0] +
		" -X k8s.io/component-base/version.gitMinor=" + parts[1]
}

// checkVersion runs 'path args...' (args default to --version) and requires
// want in its output.
func checkVersion(ctx context.Context, path, want string, args ...string) error {
	if len(args) == 0 {
		args = []string{"--version"}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	run := path + " " + strings.Join(args, " ")
	if err != nil {
		return fmt.Errorf("running %s: %w", run, err)
	}
	if !strings.Contains(string(out), want) {
		return fmt.Errorf("%s printed %q, want %q", run, strings.TrimSpace(string(out)), want)
	}
	return nil
}

// lockDir takes an exclusive flock on the cache folder's lock file, polling so
// that ctx can cancel the wait. The returned func releases it.
func lockDir(ctx context.Context, dir string, progress io.Writer) (func(), error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the build lock %s: %w", path, err)
	}
	fd := int(f.Fd())
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for announced := false; ; {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !announced {
			fmt.Fprintf(progress, "controlplane: another process is building into %s; waiting for it\n", dir)
			announced = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for the build lock %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
	return func() {
		_ = unix.Flock(fd, unix.LOCK_UN)
		_ = f.Close()
	}, nil
}

// buildBinary runs 'go build' for pkg in the tools module into a temporary
// file next to dst and renames it into place.
func buildBinary(ctx context.Context, o *EnsureOptions, t target, dst string) error {
	name := t.name
	tmp := filepath.Join(filepath.Dir(dst), fmt.Sprintf(".%s.tmp-%d", name, os.Getpid()))
	args := []string{"build"}
	if t.tags != "" {
		args = append(args, "-tags", t.tags)
	}
	if t.ldflags != "" {
		args = append(args, "-ldflags", t.ldflags)
	}
	args = append(args, "-o", tmp, t.pkg)
	cmd := exec.Command(o.GoCommand, args...)
	cmd.Dir = filepath.Join(o.ToolsDir, t.module)
	if len(t.env) > 0 {
		cmd.Env = append(os.Environ(), t.env...)
	}
	out := newTailBuffer(16 << 10)
	cmd.Stdout, cmd.Stderr = out, out

	fmt.Fprintf(o.Progress, "controlplane: building %s %s into %s (the first build takes %s; later builds reuse the Go build cache)\n",
		name, t.version, filepath.Dir(dst), t.hint)
	o.Log.Info("building", "binary", name, "package", t.pkg, "module", cmd.Dir)

	start := time.Now()
	p, err := StartProcess("go build "+name, cmd)
	if err != nil {
		return fmt.Errorf("building %s: %w", name, err)
	}
	tick := time.NewTicker(o.ProgressInterval)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-p.Done():
			waiting = false
		case <-tick.C:
			fmt.Fprintf(o.Progress, "controlplane: still building %s (%s elapsed)\n", name, time.Since(start).Round(time.Second))
		case <-ctx.Done():
			_ = p.Stop(5 * time.Second)
			_ = os.Remove(tmp)
			return fmt.Errorf("building %s: %w", name, ctx.Err())
		}
	}
	if p.Err() != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("building %s (go %s in %s): %w\n%s", name, strings.Join(args, " "), cmd.Dir, p.Err(), out.String())
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("moving the built %s into place: %w", name, err)
	}
	fmt.Fprintf(o.Progress, "controlplane: built %s in %s\n", name, time.Since(start).Round(time.Second))
	return nil
}

// tailBuffer is an io.Writer that keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
