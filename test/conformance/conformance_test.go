package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/gobin"
	"github.com/tether-dev/tether/test/pyinterp"
	"github.com/tether-dev/tether/test/typescript"
)

// TestTheKitJudgesEachSDKsHandler runs the kit against the Go, Python and
// TypeScript SDKs' handlers, which must pass every rule (the Go one also
// with the capabilities hidden from both sides: an SDK and a broker older
// than capabilities still work together), and against a handler that
// breaks five rules on purpose, which must fail those and only those.
func TestTheKitJudgesEachSDKsHandler(t *testing.T) {
	tests := []struct {
		name       string
		command    func(t *testing.T) []string
		wantFailed []string
		// hide: neither side sees the other's capabilities.
		hide bool
	}{
		{name: "go", command: func(t *testing.T) []string {
			return []string{gobin.Build(t, "github.com/tether-dev/tether/test/conformance/handlers/go")}
		}},
		{name: "go, each side meeting a peer older than capabilities", command: func(t *testing.T) []string {
			return []string{gobin.Build(t, "github.com/tether-dev/tether/test/conformance/handlers/go")}
		}, hide: true},
		{name: "python", command: func(t *testing.T) []string {
			if why := pyinterp.PythonMissing(); why != "" {
				t.Skip(why)
			}
			return []string{pyinterp.Python, "-I", "-B", "-u", "handlers/python/handler.py"}
		}},
		{name: "typescript", command: func(t *testing.T) []string {
			typescript.Build(t)
			return []string{"node", "handlers/typescript/handler.js"}
		}},
		{name: "broken", command: func(t *testing.T) []string {
			return []string{gobin.Build(t, "github.com/tether-dev/tether/test/conformance/testdata/broken")}
		}, wantFailed: []string{"ack.retry", "ack.fail", "timer.ack", "daemon.exited", "daemon.session"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			dir := t.TempDir()
			rep, err := run(ctx, options{command: tt.command(t), dir: dir, progress: testWriter{t}, hideCapabilities: tt.hide})
			if err != nil {
				t.Fatal(err)
			}
			if tt.hide {
				// Each side logs the other's capabilities at the handshake.
				for file, want := range map[string]string{"broker.log": "none listed", "handler.log": "a broker older than capabilities"} {
					if b, err := os.ReadFile(filepath.Join(dir, file)); err != nil || !strings.Contains(string(b), want) {
						t.Errorf("%s does not say %q (%v): the capabilities were not hidden", file, want, err)
					}
				}
			}
			var failed []string
			for _, r := range rep.Results {
				if !r.Pass {
					failed = append(failed, r.Rule)
				}
			}
			if len(rep.Results) != len(scenarios) || !slices.Equal(failed, tt.wantFailed) {
				t.Errorf("%d rules judged, failed %v; want %d, failed %v", len(rep.Results), failed, len(scenarios), tt.wantFailed)
			}
			if rep.Passed != (len(tt.wantFailed) == 0) {
				t.Errorf("report passed = %v with %v failed", rep.Passed, failed)
			}
		})
	}
}

// testWriter sends the kit's lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
