package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/example"
)

func TestMain(m *testing.M) { os.Exit(controlplane.RunTests(m)) }

// syncBuffer is a bytes.Buffer safe for the demo's ticker goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDemoRunsAgainstAControlPlane runs `make demo`'s function against the
// test control plane: every step must be confirmed, and every process it
// started must be gone when it returns.
func TestDemoRunsAgainstAControlPlane(t *testing.T) {
	cp := controlplane.Get(t)
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	err := runDemo(ctx, demoConfig{kubeconfig: cp.KubeconfigPath(), dir: t.TempDir(), out: &out})
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	for _, want := range []string{
		" 1. The example handler connects",
		"tether-handler-example: tether.dev/instances=1",
		"copies of demo-a/db-credentials in the cluster: demo-b, demo-c; none in demo-d",
		"finalizers of demo-a/db-credentials: [tether.dev/example]",
		"demo-b/db-credentials and demo-c/db-credentials carry password=correct-horse",
		"no finalizer in any of the",
		`refused: admission webhook "validate-ttl.example.tether.dev" denied the request: ttl.tether.dev/ttl: "banana" is not a duration such as 1h or 30m`,
		"ValidatingWebhookConfiguration tether-example: webhook validate-ttl.example.tether.dev, failurePolicy Ignore",
		"with ttl.tether.dev/ttl=1h, demo-a/session-key is admitted",
		"no copy of demo-a/db-credentials left",
		"demo-a/api-token stays Terminating",
		"no copy of demo-a/api-token left and the source is gone",
		"Event HoldReleased:",
		"copies of demo-a/cache-key left behind: demo-b",
		"demo: done in",
		"demo: stopped broker (pid",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo output lacks %q", want)
		}
	}
	// With Jaeger cached, the last step prints the trace of a pass and
	// saves it; without, the demo says it runs without traces.
	traced := []string{"tether.pass [tether-broker]", "  tether.deliver [tether-broker]", "tether.hold.add=true", ".json: a Jaeger UI opens it", "demo: stopped jaeger"}
	if !controlplane.JaegerCached() {
		traced = []string{"demo: traces: off; Jaeger is not built"}
	}
	for _, want := range traced {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo output lacks %q", want)
		}
	}
	pids := regexp.MustCompile(`pid (\d+)`).FindAllStringSubmatch(out.String(), -1)
	if len(pids) < 5 { // broker, handler, handler started again, both kills
		t.Errorf("the demo names %d processes, want 5", len(pids))
	}
	for _, m := range pids {
		pid, _ := strconv.Atoi(m[1])
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d the demo started is still there after it returned (kill -0: %v)", pid, err)
		}
	}
}

// TestDemoStopsEverythingWhenInterrupted cancels the demo's context (as
// Ctrl-C does) once the broker and the handler run: it must return an
// error, print the log paths, and leave no process behind. It runs after
// TestDemoRunsAgainstAControlPlane, on the same control plane.
func TestDemoStopsEverythingWhenInterrupted(t *testing.T) {
	cp := controlplane.Get(t)
	var out syncBuffer
	lines := example.NewLogWatcher()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runDemo(ctx, demoConfig{kubeconfig: cp.KubeconfigPath(), dir: t.TempDir(), out: io.MultiWriter(&out, lines)})
	}()
	started := make(chan error, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Minute)
		defer wcancel()
		started <- lines.WaitCount(wctx, 1, "demo: example handler started")
	}()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("the demo did not start the handler: %v\n%s", err, out.String())
		}
	case err := <-done:
		t.Fatalf("the demo ended before it was interrupted: %v\n%s", err, out.String())
	}
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("an interrupted demo reports success")
		}
	case <-time.After(time.Minute):
		t.Fatal("the demo did not return within a minute of the interrupt")
	}
	t.Logf("demo output:\n%s", out.String())
	for _, want := range []string{"demo: interrupted", "broker.log", "handler.log", "demo: stopped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the interrupted demo's output lacks %q", want)
		}
	}
	for _, m := range regexp.MustCompile(`pid (\d+)`).FindAllStringSubmatch(out.String(), -1) {
		pid, _ := strconv.Atoi(m[1])
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d is still there after the interrupted demo returned", pid)
		}
	}
}
