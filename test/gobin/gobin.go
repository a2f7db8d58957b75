package gobin

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

type key struct{ pkg, flags string }

type result struct {
	once sync.Once
	bin  string
	err  error
}

var (
	mu    sync.Mutex
	built = map[key]*result{}
)

// Build compiles the command pkg (an import path) with go build flags and
// returns the binary's path; it fails the test when the build fails. Later
// calls with the same package and flags return the same binary.
func Build(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	k := key{pkg, strings.Join(flags, " ")}
	mu.Lock()
	r := built[k]
	if r == nil {
		r = &result{}
		built[k] = r
	}
	mu.Unlock()
	r.once.Do(func() { r.bin, r.err = build(pkg, flags) })
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.bin
}

func build(pkg string, flags []string) (string, error) {
	dir, err := os.MkdirTemp("", "tether-bin-")
	if err != nil {
		return "", fmt.Errorf("making a folder for %s: %w", pkg, err)
	}
	bin := filepath.Join(dir, path.Base(pkg))
	args := append(append([]string{"build"}, flags...), "-o", bin, pkg)
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}
