package controlplane

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// shared is the control plane RunTests started for this test binary.
var shared atomic.Pointer[ControlPlane]

// RunTests runs a test package against one control plane. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(controlplane.RunTests(m)) }
//
// It parses the test flags, finds or builds the binaries (build progress on
// stderr), starts a control plane whose harness and process logs go to a
// temporary file, runs the tests and stops the control plane. The log file is
// removed when everything passed and its path printed otherwise. With -short
// no control plane is started and [Get] skips the test.
func RunTests(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	logFile, err := os.CreateTemp("", "tether-test-controlplane-*.log")
	if err != nil {
		fmt.Fprintf(os.Stderr, "controlplane: creating the log file: %v\n", err)
		return 1
	}
	keepLog := func(code int) int {
		_ = logFile.Close()
		fmt.Fprintf(os.Stderr, "controlplane: control plane logs kept in %s\n", logFile.Name())
		return code
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "controlplane", Output: logFile, Level: hclog.Debug})

	// A first build of kube-apiserver takes about ten minutes; the start
	// itself has its own, shorter timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	bins, err := Ensure(ctx, EnsureOptions{Progress: os.Stderr, Log: log.Named("ensure")})
	if err != nil {
		cancel()
		fmt.Fprintf(os.Stderr, "controlplane: %v\n", err)
		return keepLog(1)
	}
	cp, err := Start(ctx, Options{Log: log, Binaries: bins, Stdout: logFile, Stderr: logFile})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "controlplane: %v\n", err)
		return keepLog(1)
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "controlplane: ready at %s in %s\n", cp.URL(), cp.StartDuration().Round(time.Millisecond))
	}
	shared.Store(cp)
	code := m.Run()
	shared.Store(nil)
	if err := cp.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "controlplane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if code != 0 {
		return keepLog(code)
	}
	_ = logFile.Close()
	_ = os.Remove(logFile.Name())
	return code
}

// Get returns the control plane RunTests started for this test binary. It
// skips the test under -short and fails it when TestMain does not use
// RunTests.
func Get(t testing.TB) *ControlPlane {
	t.Helper()
	if cp := shared.Load(); cp != nil {
		return cp
	}
	if flag.Parsed() && testing.Short() {
		t.Skip("-short: no control plane")
	}
	t.Fatal("controlplane.Get: no control plane; call controlplane.RunTests from this package's TestMain")
	return nil
}

// Namespace creates a namespace named after the test with a random suffix and
// deletes it when the test ends. Without a controller manager a deleted
// namespace stays Terminating; the cleanup does not wait for it.
func (cp *ControlPlane) Namespace(t testing.TB) string {
	t.Helper()
	name := namespaceName(t.Name(), randomSuffix(6))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cp.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := cp.client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", name, err)
		}
	})
	return name
}

// namespaceName turns a test name into a DNS-1123 label ending in -suffix.
func namespaceName(testName, suffix string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(testName) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	base := b.String()
	if max := 63 - 1 - len(suffix); len(base) > max {
		base = base[:max]
	}
	base = strings.TrimRight(base, "-")
	if base == "" {
		base = "test"
	}
	return base + "-" + suffix
}

// randomSuffix returns n random characters from [a-z0-9].
func randomSuffix(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
