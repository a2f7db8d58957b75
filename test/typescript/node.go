package typescript

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
)

// SDKDir is the TypeScript SDK's folder in this source tree.
var SDKDir = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "sdk", "typescript")
}()

// Missing says why node or npm cannot build and run the SDK here, or is
// empty when they can.
var Missing = sync.OnceValue(func() string {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("%s is not on PATH (apt-get install -y nodejs npm): the TypeScript SDK cannot be built", tool)
		}
	}
	return ""
})

// Require skips t when node or npm is missing, or fails it under
// TETHER_CI=1, where a skip would hide that the SDK went untested.
func Require(t testing.TB) {
	t.Helper()
	if why := Missing(); why != "" {
		if os.Getenv("TETHER_CI") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
}

var built = sync.OnceValue(build)

// Install builds the SDK (Build) and installs the dependencies of the
// package in dir, a handler that depends on the SDK by path, from its
// committed package-lock.json (npm ci, when its node_modules is missing or
// older than the lockfile), under the same file lock as the build.
func Install(t testing.TB, dir string) {
	t.Helper()
	Build(t)
	err := locked(func() error {
		if !stale(filepath.Join(dir, "node_modules", ".package-lock.json"), filepath.Join(dir, "package-lock.json")) {
			return nil
		}
		return npm(dir, "ci", "--no-audit", "--no-fund")
	})
	if err != nil {
		t.Fatal(err)
	}
}

// locked runs fn holding the build's file lock, which test binaries of
// other packages that build or install at the same time wait on.
func locked(fn func() error) error {
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "tether-typescript-build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("opening the build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("taking the build lock: %w", err)
	}
	return fn()
}

// Build installs the SDK's dependencies (npm ci, when node_modules is
// missing or older than package-lock.json) and compiles it with tsc, once
// per test binary; it fails t when either fails. Test binaries of other
// packages that build at the same time wait on a file lock.
func Build(t testing.TB) {
	t.Helper()
	Require(t)
	if err := built(); err != nil {
		t.Fatal(err)
	}
}

// BuildSDK is Build for a program rather than a test: it says why node or
// npm is missing, or why the install or the build failed.
func BuildSDK() error {
	if why := Missing(); why != "" {
		return fmt.Errorf("%s", why)
	}
	return built()
}

func build() error {
	return locked(func() error {
		if stale(filepath.Join(SDKDir, "node_modules", ".package-lock.json"), filepath.Join(SDKDir, "package-lock.json")) {
			if err := npm(SDKDir, "ci", "--no-audit", "--no-fund"); err != nil {
				return err
			}
		}
		return npm(SDKDir, "run", "build")
	})
}

// stale tells whether installed is missing or older than lockfile.
func stale(installed, lockfile string) bool {
	a, err := os.Stat(installed)
	if err != nil {
		return true
	}
	b, err := os.Stat(lockfile)
	return err != nil || a.ModTime().Before(b.ModTime())
}

func npm(dir string, args ...string) error {
	cmd := exec.Command("npm", args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("npm %v in %s: %w\n%s", args, dir, err, out.Bytes())
	}
	return nil
}
