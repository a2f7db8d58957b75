package pyhandler

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tether-dev/tether/test/controlplane"
)

// kopfRunnerTest is a test written as Kopf's tests are: it runs the
// handler with KopfRunner while the Go side creates a widget, waits for
// the handler's line, and reports what the runner saw.
const kopfRunnerTest = `import sys, time
import tether.testing as testing

broker, namespace, handler = sys.argv[1:4]
with testing.KopfRunner(["run", "--verbose", "--standalone", "--insecure", "--broker", broker,
                         "-n", namespace, handler]) as runner:
    # sys.stdout is the runner's output while it runs, as in Kopf
    print("runner started", file=sys.__stdout__, flush=True)
    deadline = time.monotonic() + 30
    while "printed for w" not in runner.output and time.monotonic() < deadline:
        time.sleep(0.05)
print("exit", runner.exit_code, runner.exception, flush=True)
print("saw the create" if "[" + namespace + "/w] logged for w" in runner.output else "missed the create", flush=True)
`

const kopfRunnerHandler = `import tether as kopf

@kopf.on.create("widgets")
def created(name, logger, **_):
    print("printed for", name)
    logger.info("logged for %s", name)
`

// TestKopfRunnerRunsAHandlerInATestAgainstTheBroker: tether.testing's
// KopfRunner runs a handler file in the test's process against the real
// broker, and its output has what the handler printed and logged.
func TestKopfRunnerRunsAHandlerInATestAgainstTheBroker(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0")
	dir := t.TempDir()
	script, handler := filepath.Join(dir, "test_runner.py"), filepath.Join(dir, "widgets.py")
	for path, src := range map[string]string{script: kopfRunnerTest, handler: kopfRunnerHandler} {
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The script imports tether as a test of the user's would: from the
	// SDK's folder on PYTHONPATH.
	cmd := exec.Command(python, "-s", "-B", "-u", script, b.addr, ns, handler)
	cmd.Dir = sdkDir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+sdkDir)
	p := startProcess(t, "kopfrunner", cmd)
	p.stdout.wait(t, "runner started", 1)
	createWidget(t, dyn, ns, "w", nil)
	if code := p.waitExit(t, waitTimeout+10e9); code != 0 {
		t.Fatalf("the test script exited with %d", code)
	}
	for _, want := range []string{"exit 0 None", "saw the create"} {
		if !p.stdout.has(want) {
			t.Errorf("the test script did not say %q:\n%s", want, p.stdout.text())
		}
	}
}
