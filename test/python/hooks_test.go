package pyhandler

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/test/controlplane"
)

// TestStartupRunsBeforeTheFirstDeliveryAndProbesAnswer runs hooks_handler.py
// with `python3 -m tether run --liveness` against a real broker, with a
// widget waiting for it: the endpoint answers 503 while the startup
// function is retried and nothing is connected; once it succeeds the
// handler connects, the widget's create is delivered after it, and the
// endpoint answers 200 with the probe's result; on SIGTERM the cleanup
// function runs after the goodbye and the process exits 0.
func TestStartupRunsBeforeTheFirstDeliveryAndProbesAnswer(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	createWidget(t, dyn, ns, "early", nil) // there before the handler: delivered as soon as it connects

	const name = "py-hooks"
	script, err := filepath.Abs("hooks_handler.py")
	if err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(t.TempDir(), "gate")
	probes := "http://" + freeAddr(t) + "/healthz"
	// -E -s -B -u: -I without -P, since -m must find the SDK in the working directory.
	cmd := exec.Command(python, "-E", "-s", "-B", "-u", "-m", "tether", "run", script, "--broker", b.addr,
		"--insecure", "--name", name, "--namespace", ns, "--liveness", probes)
	cmd.Dir, cmd.Env = sdkDir, append(os.Environ(), "HOOKS_GATE="+gate)
	h := startProcess(t, name, cmd)

	waitProbes(t, probes, http.StatusServiceUnavailable, map[string]any{"error": "not connected to the broker yet"})
	h.stderr.wait(t, "startup function wait_for_the_gate failed and will be retried", 2)
	if h.stderr.has(welcomed) || h.stderr.has("delivered CREATE") {
		t.Fatalf("connected while the startup function was still failing:\n%s", h.stderr.text())
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	waitWidget(t, dyn, ns, "early", "created by the handler", func(o *unstructured.Unstructured) bool {
		if o == nil {
			return false
		}
		_, stored, _ := unstructured.NestedFieldNoCopy(o.Object, "status", "create")
		return stored
	})
	text := h.stderr.text()
	startup, connected := strings.Index(text, "startup done after"), strings.Index(text, welcomed)
	delivered := strings.Index(text, "delivered CREATE "+ns+"/early")
	if startup < 0 || connected < startup || delivered < connected {
		t.Errorf("want the startup (at %d), then the connection (at %d), then the delivery (at %d):\n%s",
			startup, connected, delivered, text)
	}
	waitProbes(t, probes, http.StatusOK, map[string]any{"created_count": float64(1)})

	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := h.waitExit(t, 10*time.Second); code != 0 {
		t.Errorf("exit status after SIGTERM %d, want 0", code)
	}
	text = h.stderr.text()
	if goodbye, cleanup := strings.Index(text, "sending goodbye"), strings.Index(text, "cleanup after the goodbye"); goodbye < 0 || cleanup < goodbye {
		t.Errorf("want the cleanup (at %d) after the goodbye (at %d):\n%s", cleanup, goodbye, text)
	}
}

// waitProbes waits until GET url answers status with the JSON body want.
func waitProbes(t *testing.T, url string, status int, want map[string]any) {
	t.Helper()
	client := http.Client{Timeout: 5 * time.Second}
	last := "no answer"
	eventually(t, fmt.Sprintf("GET %s: %d %v", url, status, want), func() bool {
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		var got map[string]any
		if err == nil {
			err = json.Unmarshal(raw, &got)
		}
		last = fmt.Sprintf("%d %s (%v)", resp.StatusCode, raw, err)
		return err == nil && resp.StatusCode == status && reflect.DeepEqual(got, want)
	})
	t.Logf("GET %s: %s", url, last)
}
